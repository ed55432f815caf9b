// FP8 on CUDA. abs_max: the largest |x| into amax[0] in device memory (no host synchronisation), by
// grid-stride blocks each reducing to a partial, then one block over the partials (a max is exact:
// the order does not matter; a NaN anywhere is kept by a flag, which fmaxf would drop). fp8_round:
// elementwise through the hardware's own conversion (cvt.rn.satfinite via cuda_fp8.h, which
// kernels/fp8.h matches bit for bit: tests/kernels/fp8_nvidia_test.cpp) under the scale fp8_scale
// takes from amax[0], read on the device once per block. The FP8 GEMM path's cast is fp8_cast.cu.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

constexpr int kMaxPartials = 1024;

// The block's largest value of v (>= 0), NaN if any thread's is NaN; to every thread. Requirements
// as block_sum's.
__device__ float block_abs_max(float v) {
  __shared__ float warp_max[32];
  __shared__ int any_nan;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (threadIdx.x == 0) any_nan = 0;
  __syncthreads();
  if (isnan(v)) any_nan = 1;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < warps ? warp_max[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return any_nan ? __int_as_float(0x7fc00000) : v;
}

template <typename E>
__global__ void partial_abs_max_kernel(const E* x, std::int64_t n, float* partial) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  float m = 0.0f;
  bool nan = false;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float a = fabsf(to_f32(x[i]));
    nan = nan || isnan(a);
    m = fmaxf(m, a);
  }
  m = block_abs_max(nan ? __int_as_float(0x7fc00000) : m);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

__global__ void total_abs_max_kernel(const float* partial, int count, float* amax, bool combine) {
  float m = 0.0f;
  bool nan = false;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    nan = nan || isnan(partial[i]);
    m = fmaxf(m, partial[i]);
  }
  if (combine && threadIdx.x == 0) {
    nan = nan || isnan(*amax);
    m = fmaxf(m, *amax);
  }
  m = block_abs_max(nan ? __int_as_float(0x7fc00000) : m);
  if (threadIdx.x == 0) *amax = m;
}

// The scale is computed once per block from amax[0] (fp8_scale's frexp in double is not free), then a
// grid-stride loop over the elements.
template <typename E>
__global__ void round_to_fp8_kernel(E* out, const E* x, std::int64_t n, const float* amax,
                                    __nv_fp8_interpretation_t interpretation, Fp8Format format) {
  __shared__ float scale;
  if (threadIdx.x == 0) scale = fp8_scale(*amax, format);
  __syncthreads();
  const float unscale = 1.0f / scale;  // exact, a power of two
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(to_f32(x[i]) * scale, __NV_SATFINITE, interpretation);
    const float value = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, interpretation)));
    store_f32(out + i, value * unscale);
  }
}

}  // namespace

void abs_max(const LaunchContext& ctx, Buf amax, Buf x, std::int64_t n, bool combine) {
  check_abs_max("cuda", amax, x, n);
  const int blocks = static_cast<int>(std::clamp<std::int64_t>((n + kBlock - 1) / kBlock, 1, kMaxPartials));
  Scratch<float> partial(ctx, static_cast<std::size_t>(blocks));
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    partial_abs_max_kernel<E><<<static_cast<unsigned>(blocks), kBlock, 0, ctx.stream>>>(typed<const E>(x), n,
                                                                                        partial.get());
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
  total_abs_max_kernel<<<1, kBlock, 0, ctx.stream>>>(partial.get(), blocks, typed<float>(amax), combine);
  PTRAIN_CUDA_CHECK_LAUNCH();
}

void fp8_round(const LaunchContext& ctx, Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format) {
  check_fp8_round("cuda", out, x, amax, n);
  const __nv_fp8_interpretation_t interpretation = format == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  if (n <= 0) return;
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    round_to_fp8_kernel<E><<<grid_for(n), kBlock, 0, ctx.stream>>>(typed<E>(out), typed<const E>(x), n,
                                                                    typed<const float>(amax), interpretation, format);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ptrain::kernels::cuda
