// The attention kernels' shared constants and helpers, and the backward's row_dot kernel.
// Internal to kernels/cuda/attention.cu, which alone includes it (the design is described there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ptrain::kernels::cuda::attention_detail {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // every kernel: 4 warps
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ------------------------------------------------------------------------------------------------
// Shared helpers

__device__ __forceinline__ float to_f(float x) {
  return x;
}
__device__ __forceinline__ float to_f(bf16 x) {
  return __bfloat162float(x);
}

// D_i of query row `row` = (b*Tq + t)*Hq + h lives in 4 bytes of d_q's row at column `col`: column 0,
// and for the bf16 dQ kernel's second column chunk also its first column (each dQ CTA reads the slot
// in the columns it alone overwrites, so no CTA can overwrite a slot another has yet to read).
template <typename T>
__device__ __forceinline__ float* dvec_slot(T* d_q, long long row, int D, int col = 0) {
  return reinterpret_cast<float*>(d_q + row * D + col);
}
template <typename T>
__device__ __forceinline__ const float* dvec_slot(const T* d_q, long long row, int D, int col = 0) {
  return reinterpret_cast<const float*>(d_q + row * D + col);
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// D_i = dot(d_out_i, out_i) for every query row (one warp per row), written into d_q's row i at
// column 0 and, when `second_slot` > 0, at that column too.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    row_dot_kernel(const T* __restrict__ d_out, const T* __restrict__ out, T* d_q, long long rows, int D,
                   int second_slot) {
  const long long row = static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;  // warp-uniform
  const int lane = threadIdx.x & 31;
  const T* a = d_out + row * D;
  const T* o = out + row * D;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s = fmaf(to_f(a[d]), to_f(o[d]), s);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) *dvec_slot(d_q, row, D) = s;
  if (lane == 0 && second_slot > 0) *dvec_slot(d_q, row, D, second_slot) = s;
}

}  // namespace ptrain::kernels::cuda::attention_detail
