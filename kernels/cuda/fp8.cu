// FP8 on CUDA. abs_max: the largest |x| into amax[0] in device memory (no host synchronisation):
// grid-stride blocks fold the bits of |x| into it by atomicMax, as the ops' fused amaxes do
// (amax.cuh: a max is exact and order-free, and a NaN anywhere is kept above every number). fp8_round:
// elementwise through the hardware's own conversion (cvt.rn.satfinite via cuda_fp8.h, which
// kernels/fp8.h matches bit for bit: tests/kernels/fp8_nvidia_test.cpp) under the scale fp8_scale
// takes from amax[0], read on the device once per block. The FP8 GEMM path's cast is fp8_cast.cu.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

// abs_max's grid: enough blocks to stream memory, few enough that their atomicMaxes on one address
// stay a small part of the pass.
constexpr unsigned kAbsMaxBlocks = 1024;

// Each thread folds the bits of |x| over its grid-stride elements, each block its threads', into
// amax_bits (amax.cuh: exact and order-free, a NaN as kAmaxNan).
template <typename E>
__global__ void abs_max_kernel(const E* x, std::int64_t n, unsigned* amax_bits) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  unsigned bits = 0;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    bits = max(bits, abs_bits(to_f32(x[i])));
  block_fold_amax(amax_bits, bits);
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
  if (!combine) zero_amax(ctx, amax);
  if (n <= 0) return;
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    abs_max_kernel<E><<<std::min(grid_for(n), kAbsMaxBlocks), kBlock, 0, ctx.stream>>>(typed<const E>(x), n,
                                                                                      typed<unsigned>(amax));
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
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
