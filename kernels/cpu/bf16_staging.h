// BF16 on the CPU backend. The CPU kernels compute in F32 only; an op entry stages its BF16
// arguments through a Bf16Staging: each is widened into an F32 temporary before the kernel runs and,
// if the op writes it, rounded back (to nearest even, kernels/bf16.h) when the staging ends. The
// result is fp32 math on the bf16 values with every output rounded once, which is what the CUDA
// kernels compute (fp32 math, bf16 loads and stores; kernels/cuda/device_math.cuh) up to summation
// order, and to the bf16 tensor-core products of CUDA attention.
//
//  - Written arguments are staged from their current values: outputs that accumulate (d_weight +=)
//    accumulate onto them, and elements the kernel leaves alone come back unchanged.
//  - Aliasing stays as ops.h allows: every input is copied before the kernel runs and every output
//    written back after it, so an output aliasing an input sees what the F32 kernel would.
//  - F32 arguments (and null ones) pass through untouched: the F32 path costs nothing. A BF16
//    argument costs an F32 copy per call; the CPU backend's BF16 is a reference, not a fast path.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/buffer.h"

namespace ptrain::kernels::cpu {

// n values converted between bf16 bits and float (parallel above kParallelMinElements).
void widen_bf16(float* dst, const std::uint16_t* src, std::int64_t n);
void round_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n);

class Bf16Staging {
 public:
  Bf16Staging() = default;
  Bf16Staging(const Bf16Staging&) = delete;
  Bf16Staging& operator=(const Bf16Staging&) = delete;
  // Rounds the staged outputs back into their buffers: on every way out of the entry, so the
  // outputs hold what the F32 kernel wrote, as if it had written them directly.
  ~Bf16Staging();

  // An argument the op reads, holding `count` values: BF16 becomes an F32 copy; F32 or null as given.
  Buf input(Buf b, std::int64_t count);
  // An argument the op writes (or reads and writes): as input(), and written back at the end.
  Buf output(Buf b, std::int64_t count);

  // A table of rows of `row_len` values picked by ids[0, n) (>= 0, checked by the entry, or
  // kRowElsewhere, which picks none and is passed on as it is), whose row
  // count the op is not told (embeddings). BF16: only the rows that occur are staged, and the ids are
  // renumbered into them (order kept, so sums over equal ids run as in the F32 kernel). F32: as given.
  struct Rows {
    Buf table;
    Buf ids;
  };
  Rows input_rows(Buf table, Buf ids, std::int64_t n, std::int64_t row_len);
  Rows output_rows(Buf table, Buf ids, std::int64_t n, std::int64_t row_len);

  // A block of F32 temporaries; blocks outlive the staging in its thread's pool (bf16_staging.cpp).
  struct Block {
    std::unique_ptr<float[]> data;
    std::int64_t capacity = 0;
  };

 private:
  struct WriteBack {
    std::uint16_t* target;
    const float* staged;
    std::int64_t count;
  };
  float* temporary(std::int64_t count);  // uninitialised, back to the pool with the staging
  Buf stage(Buf b, std::int64_t count, bool written);
  Rows stage_rows(Buf table, Buf ids, std::int64_t n, std::int64_t row_len, bool written);

  std::vector<Block> temporaries_;
  std::vector<std::unique_ptr<std::int32_t[]>> renumbered_ids_;
  std::vector<WriteBack> write_backs_;
};

}  // namespace ptrain::kernels::cpu
