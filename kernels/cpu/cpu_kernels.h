// Entry points of the CPU kernels, one group per file in kernels/cpu/. Each entry checks its arguments
// (kernels/op_checks.h: std::invalid_argument naming the op) and runs the kernel; CpuOps
// (cpu_ops.cpp) forwards the Ops interface to them. Semantics are those documented in ops.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/adamw_step.h"
#include "kernels/attention_shape.h"
#include "kernels/buffer.h"
#include "kernels/fp8.h"

namespace ptrain::kernels::cpu {

// linear.cpp
void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K);
void linear_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N, int K);
void linear_input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K);

// linear_gelu.cpp
void linear_gelu_forward(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N, int K);
void linear_backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre, int M,
                          int N, int K);

// embedding.cpp
void embedding_forward(Buf out, Buf tokens, Buf table, Buf positions, int N, int T, int C);
void embedding_backward(Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N, int T, int C);

// layernorm.cpp
// The forwards' `amax` as ops.h's (null: none).
void layernorm_forward(Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias, int N, int C, float eps,
                       Buf amax);
void layernorm_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf mean, Buf rstd,
                        int N, int C);
void add_layernorm_forward(Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b, Buf weight, Buf bias, int N,
                           int C, float eps, Buf amax);

// rmsnorm.cpp
void rmsnorm_forward(Buf out, Buf rstd, Buf in, Buf weight, int N, int C, float eps, Buf amax);
void rmsnorm_backward(Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight, Buf rstd, int N, int C);
void add_rmsnorm_forward(Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight, int N, int C, float eps,
                         Buf amax);

// rope.cpp
void rope_forward(Buf x, int B, int T, int H, int D, float theta, int pos0);
void rope_backward(Buf d_x, int B, int T, int H, int D, float theta, int pos0);

// attention.cpp
void attention_forward(Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s);
void attention_backward(Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                        const AttentionShape& s);
void attention_merge(Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H, int D);

// activations.cpp
// `amax` as ops.h's (null: none): of out (fp8_gemm_gelu's); of d_in; of out; [2] of d_gate and d_up.
void gelu_forward(Buf out, Buf in, std::int64_t n, Buf amax);
void gelu_backward(Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax);
void swiglu_forward(Buf out, Buf gate, Buf up, std::int64_t n, Buf amax);
void swiglu_backward(Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up, std::int64_t n, Buf amax);

// elementwise.cpp
void add(Buf out, Buf a, Buf b, std::int64_t n);
void accumulate(Buf acc, Buf x, std::int64_t n);
void scale(Buf x, float factor, std::int64_t n);
void fill(Buf x, float value, std::int64_t n);
// fill_normal.cpp
void fill_normal(Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key, std::uint64_t first,
                 std::uint64_t row_stride, float stddev);
void convert(Buf dst, Buf src, std::int64_t n);

// cross_entropy.cpp
// The one check of the targets' values (ops.h): every target must be below V.
void require_targets_below(const char* op, const std::int32_t* targets, int N, int V);
void cross_entropy_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf targets, int N, int V, int Vp,
                                    float grad_scale);

// cross_entropy_shard.cpp
void cross_entropy_shard_stats(Buf stats, Buf logits, Buf targets, int N, int V, int Vs, int shard);
void cross_entropy_shard_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf all_stats, Buf targets,
                                          int N, int V, int Vs, int shard, int shards, float grad_scale);

// moe.cpp
void moe_route(Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits, int B, int T, int E,
               int k, int capacity, int first_expert, int experts_here);
void moe_route_backward(Buf d_logits, Buf d_weight, Buf probs, Buf choice, Buf weight, Buf counts, int B,
                        int T, int E, int k, float aux_scale);
void moe_scatter(Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight, int N, int k, int R, int C);
void moe_combine(Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C);

// adamw.cpp
void adamw_step(Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n, const AdamWStep& s);

// reduce.cpp
void sum(Buf out, Buf x, std::int64_t n);
void sum_squares(Buf out, Buf x, std::int64_t n);

// fp8.cpp
void abs_max(Buf amax, Buf x, std::int64_t n, bool combine);
void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format);
void fp8_cast(Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax, std::int64_t rows, std::int64_t cols);

// fp8_gemm.cpp
void fp8_gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K,
              bool accumulate);
void fp8_gemm_gelu(Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N,
                   int K, Buf amax);

// memory.cpp: zero-filled, 256-byte aligned host memory (released with std::free); a buffer of
// kHugePageBytes or more is aligned to kHugePageBytes and asked for transparent huge pages.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
void* allocate(std::size_t bytes);

// ---- helpers shared by the kernels

// Typed views of a Buf, once the entry has checked its dtype (kernels/op_checks.h).
inline float* f32(Buf b) {
  return b.as<float>();
}
inline const float* cf32(Buf b) {
  return b.as<const float>();
}
inline const std::int32_t* ci32(Buf b) {
  return b.as<const std::int32_t>();
}

// reduce.cpp

// sums[c] += sum over r of rows[r*C + c], for rows [R, C]. Columns are split into chunks owned by
// one thread each and every sum runs over r in order with a double accumulator: the result is
// bitwise the same for any thread count. Used for bias gradients and norm-weight gradients.
void column_sums_accumulate(float* sums, const float* rows, std::int64_t R, std::int64_t C);

// Elementwise loops below this many elements stay on one thread (a parallel region costs a few
// microseconds; below ~32K floats the loop itself is faster than that).
inline constexpr std::int64_t kParallelMinElements = 1 << 15;

// f(begin, count) over [0, n) in chunks of kParallelChunk (the last shorter), statically spread
// over the OpenMP threads: chunk begin / kParallelChunk is the same work whatever the thread count.
inline constexpr std::int64_t kParallelChunk = 1 << 14;
inline std::int64_t parallel_chunk_count(std::int64_t n) { return (n + kParallelChunk - 1) / kParallelChunk; }
template <typename F>
void parallel_chunks(std::int64_t n, F&& f) {
  constexpr std::int64_t kChunk = kParallelChunk;
  const std::int64_t chunks = parallel_chunk_count(n);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk;
    f(begin, n - begin < kChunk ? n - begin : kChunk);
  }
}

}  // namespace ptrain::kernels::cpu
