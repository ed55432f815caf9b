// Device helpers shared by the kernels: F32/BF16 loads and stores (math is always fp32; BF16 stores
// round to nearest even), one element or a 16-byte vector at a time (Pack), deterministic warp/block sums (a fixed shuffle tree, then the warps'
// partials in warp order: the same bits on every run for a given block size) and a block's row add.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ptrain::kernels::cuda {

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

__device__ __forceinline__ void store_f32(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_f32(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16(v);
}

// W consecutive elements of E as fp32, moved in one access: a 16-byte vector when W * sizeof(E) == 16
// (the caller checks the address is 16-byte aligned), else W == 1, one element.
template <typename E, int W>
struct Pack {
  static_assert(W == 1 || W * sizeof(E) == 16, "a Pack is one element or one 16-byte vector");
  float v[W];

  __device__ __forceinline__ void load(const E* p) {
    if constexpr (W == 1) {
      v[0] = to_f32(*p);
    } else {
      alignas(16) E e[W];
      *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = to_f32(e[j]);
    }
  }
  __device__ __forceinline__ void store(E* p) const {
    if constexpr (W == 1) {
      store_f32(p, v[0]);
    } else {
      alignas(16) E e[W];
#pragma unroll
      for (int j = 0; j < W; ++j) store_f32(e + j, v[j]);
      *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
    }
  }
};

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over the block, returned to every thread. Needs blockDim.x a multiple of 32 (<= 1024),
// blockDim.y == blockDim.z == 1, and every thread of the block to call it (no early return before).
// May be called several times in a row: the leading barrier keeps the previous call's readers safe.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T warp_totals[32];
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  const unsigned warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  v = lane < warps ? warp_totals[lane] : T(0);
  return warp_sum(v);
}

// Row `row` of x_out = a + b ([rows, C], fp32 sums stored as X), by the whole block: the residual add
// of the fused add + norm kernels. Ends with a barrier, after which every thread of the block reads
// the stored (rounded) sums, whichever elements it reads. x_out may alias a or b.
template <typename X>
__device__ void block_add_row(X* x_out, const X* a, const X* b, int C, std::int64_t row) {
  const std::int64_t base = row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    store_f32(x_out + base + c, to_f32(a[base + c]) + to_f32(b[base + c]));
  }
  __syncthreads();
}

}  // namespace ptrain::kernels::cuda
