// Owning buffers in a backend's memory (kernels::Ops::allocate: host memory for the CPU backend,
// device memory for CUDA): the engine's flat parameter/gradient/optimizer buffers and arenas.
// Whoever reads or writes one from the host goes through the backend's copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/buffer.h"
#include "kernels/ops.h"

namespace ptrain::runtime {

// The view `elements` elements of b's dtype past b (null stays null).
inline kernels::Buf advance(kernels::Buf b, std::int64_t elements) {
  if (!b) return b;
  return {static_cast<char*>(b.ptr) + elements * static_cast<std::int64_t>(kernels::dtype_size(b.dtype)), b.dtype};
}

// Gives a OwnedBuffer's memory back to the backend that allocated it.
struct ReleaseTo {
  const kernels::Ops* memory = nullptr;
  void operator()(void* p) const;
};

class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  // Zero-filled storage for `count` elements of `dtype` in `memory`'s device, 256-byte aligned.
  OwnedBuffer(const kernels::Ops& memory, std::int64_t count, kernels::DType dtype);

  std::int64_t size() const { return count_; }
  std::size_t bytes() const { return static_cast<std::size_t>(count_) * kernels::dtype_size(dtype_); }
  kernels::DType dtype() const { return dtype_; }
  void* data() const { return data_.get(); }
  // A view starting `offset` elements in.
  kernels::Buf at(std::int64_t offset = 0) const;

 private:
  std::unique_ptr<void, ReleaseTo> data_;
  std::int64_t count_ = 0;
  kernels::DType dtype_ = kernels::DType::F32;
};

// Bump allocator over one OwnedBuffer it owns, or over a region of memory owned elsewhere (over()):
// hands out views aligned to kAlignment bytes from its start; reset() frees them all at once.
class Arena {
 public:
  static constexpr std::int64_t kAlignment = 64;  // a cache line; also enough for AVX-512 loads

  Arena() = default;
  Arena(const kernels::Ops& memory, std::int64_t bytes);
  // `bytes` bytes from `region` (kAlignment-aligned), which must outlive the arena.
  static Arena over(kernels::Buf region, std::int64_t bytes);
  // Bytes an arena needs for views of these sizes taken in this order (what take() will ask).
  static std::int64_t aligned_end(std::int64_t used, std::int64_t count, kernels::DType dtype);
  kernels::Buf take(std::int64_t count, kernels::DType dtype);
  std::int64_t used_bytes() const { return used_; }
  std::int64_t capacity_bytes() const { return capacity_; }
  void reset() { used_ = 0; }

 private:
  OwnedBuffer storage_;  // empty for an arena over()
  char* base_ = nullptr;
  std::int64_t capacity_ = 0;
  std::int64_t used_ = 0;
};

}  // namespace ptrain::runtime
