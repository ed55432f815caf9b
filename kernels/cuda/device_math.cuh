// Device helpers shared by the kernels: F32/BF16 loads and stores (math is always fp32; BF16 stores
// round to nearest even), one element or up to 16 bytes at a time (Pack), deterministic warp/block
// sums (a fixed shuffle tree, then the warps' partials in warp order: the same bits on every run for a
// given block size) and a block's row add.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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

// W consecutive elements of E (W a power of two) as fp32, moved in the widest accesses their size
// allows, up to 16 bytes each. The address must be aligned to min(16, W * sizeof(E)) bytes: element
// c of a row with c a multiple of W is, when the row starts 16-byte aligned (launch.cuh's
// rows_vectorizable checks that).
template <typename E, int W>
struct Pack {
  static constexpr int kBytes = W * static_cast<int>(sizeof(E));
  using Chunk = std::conditional_t<
      kBytes % 16 == 0, uint4,
      std::conditional_t<kBytes % 8 == 0, uint2, std::conditional_t<kBytes % 4 == 0, unsigned, unsigned short>>>;
  static constexpr int kChunks = kBytes / static_cast<int>(sizeof(Chunk));
  float v[W];

  __device__ __forceinline__ void load(const E* p) {
    alignas(16) E e[W];
#pragma unroll
    for (int q = 0; q < kChunks; ++q) reinterpret_cast<Chunk*>(e)[q] = reinterpret_cast<const Chunk*>(p)[q];
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = to_f32(e[j]);
  }
  __device__ __forceinline__ void store(E* p) const {
    alignas(16) E e[W];
#pragma unroll
    for (int j = 0; j < W; ++j) store_f32(e + j, v[j]);
#pragma unroll
    for (int q = 0; q < kChunks; ++q) reinterpret_cast<Chunk*>(p)[q] = reinterpret_cast<const Chunk*>(e)[q];
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

// Row `row` of x_out = a + b ([rows, C], fp32 sums stored as X), by the whole block in Packs of P: the
// residual add of the fused add + norm kernels. Ends with a barrier, after which every thread of the
// block reads the stored (rounded) sums, whichever elements it reads. x_out may alias a or b.
template <int P, typename X>
__device__ void block_add_row(X* x_out, const X* a, const X* b, int C, std::int64_t row) {
  const std::int64_t base = row * C;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> sum, addend;
    sum.load(a + base + c);
    addend.load(b + base + c);
#pragma unroll
    for (int j = 0; j < P; ++j) sum.v[j] += addend.v[j];
    sum.store(x_out + base + c);
  }
  __syncthreads();
}

}  // namespace ptrain::kernels::cuda
