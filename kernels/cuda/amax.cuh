// An op's fused amax (ops.h: `amax`, the largest |value| of an output as stored, NaN if any is) and
// fp8_cast's record, taken in the kernel that stores the values rather than in a pass of its own.
// Non-negative floats order as unsigned integers by their bits, a NaN with its sign cleared above
// infinity, so each thread keeps the max of the bits of |stored value| in a register
// (store_folding_amax), the block reduces them (a max per warp, then over the warps) and thread 0
// folds the block's into amax[0] with one atomicMax on its bits. A max is exact and order-free: the
// same value as abs_max's, and a NaN goes in as abs_max writes one (kAmaxNan), whatever its payload.
// The op entry zeroes the amax first on the op's stream (zero_amax), so the kernels only fold.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/buffer.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_context.h"

namespace ptrain::kernels::cuda {

inline constexpr unsigned kAmaxNan = 0x7fc00000u;  // the NaN abs_max writes (fp8.cu)
inline constexpr unsigned kInfBits = 0x7f800000u;

// The bits of |v| (sign cleared: they order as the magnitudes do).
__device__ __forceinline__ unsigned abs_bits(float v) {
  return __float_as_uint(fabsf(v));
}

// *p = v in E, as store_f32, and bits = max(bits, the bits of |the value stored|): for BF16 the
// rounded value, which is what a later abs_max over the output reads.
template <typename E>
__device__ __forceinline__ void store_folding_amax(E* p, float v, unsigned& bits) {
  E e;
  store_f32(&e, v);
  *p = e;
  bits = max(bits, abs_bits(to_f32(e)));
}

// The bits of |v| once stored as E, for values a Pack stores (Pack::store rounds them the same way).
template <typename E>
__device__ __forceinline__ unsigned stored_abs_bits(float v) {
  E e;
  store_f32(&e, v);
  return abs_bits(to_f32(e));
}

// The largest v over the block, to thread 0 (the others get partial maxima). Every thread of the
// block calls it, blockDim.x a multiple of 32 (<= 1024), blockDim.y == blockDim.z == 1, as block_sum;
// it may be called several times in a row (the leading barrier keeps the previous call's reader safe).
__device__ __forceinline__ unsigned block_max_bits(unsigned v) {
  __shared__ unsigned warp_max[32];
  v = __reduce_max_sync(0xffffffffu, v);
  __syncthreads();
  if ((threadIdx.x & 31u) == 0) warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (unsigned w = 1; w < (blockDim.x >> 5); ++w) v = max(v, warp_max[w]);
  return v;
}

// Folds every thread's bits (of |stored values|) into *amax_bits: the block's largest, by one
// atomicMax from thread 0 (none for 0, which changes nothing); a NaN as kAmaxNan, above every number.
// Called by every thread of the block (block_max_bits), amax_bits the same in all.
__device__ __forceinline__ void block_fold_amax(unsigned* amax_bits, unsigned bits) {
  bits = block_max_bits(bits);
  if (threadIdx.x == 0 && bits != 0) atomicMax(amax_bits, bits > kInfBits ? kAmaxNan : bits);
}

// The op entry's part, after check_output_amax (op_checks.h): zeroes the amax's `count` values on the
// op's stream before the kernels fold into them (the op's amax overwrites, it does not combine).
// Nothing without an amax.
inline void zero_amax(const LaunchContext& ctx, Buf amax, std::size_t count = 1) {
  if (amax) PTRAIN_CUDA_CHECK(cudaMemsetAsync(amax.ptr, 0, count * sizeof(float), ctx.stream));
}

}  // namespace ptrain::kernels::cuda
