// FP8 on CUDA (ops.h: abs_max, fp8_round (fp8.cu); fp8_cast (fp8_cast.cu); fp8_gemm, fp8_gemm_gelu
// (fp8_gemm.cu); the numerics of kernels/fp8.h).
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/fp8.h"

namespace ptrain::kernels::cuda {

void abs_max(const LaunchContext& ctx, Buf amax, Buf x, std::int64_t n, bool combine);
void fp8_round(const LaunchContext& ctx, Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format);
void fp8_cast(const LaunchContext& ctx, Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax,
              std::int64_t rows, std::int64_t cols);
void fp8_gemm(const LaunchContext& ctx, Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M,
              int N, int K, bool accumulate, Fp8Sums sums);
void fp8_gemm_gelu(const LaunchContext& ctx, Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale,
                   Buf bias, int M, int N, int K, Fp8Sums sums, Buf amax = {});

}  // namespace ptrain::kernels::cuda
