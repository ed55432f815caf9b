// Linear layer on cuBLASLt, alone and with GELU fused into its epilogue (see linear.cu). Semantics as
// ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void linear_forward(const LaunchContext& ctx, Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K);
void linear_backward(const LaunchContext& ctx, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                     Buf weight, int M, int N, int K);
void linear_gelu_forward(const LaunchContext& ctx, Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M,
                         int N, int K);
void linear_input_grad_add(const LaunchContext& ctx, Buf d_in, Buf d_out, Buf weight, int M, int N, int K);
void linear_backward_gelu(const LaunchContext& ctx, Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                          Buf weight, Buf pre, int M, int N, int K);

// The forward GEMM's arguments, out^T[N,M] = (W stored [K,N], op T) . (in stored [K,M]), of in's
// element type (the FP8 GEMMs set theirs: fp8_gemm.cu).
GemmArgs forward_gemm(Buf out, Buf in, Buf weight, int M, int N, int K);
// out[M,N] = the GEMM g (+ bias[N], in the BIAS epilogue where cuBLASLt takes it, else broadcast into
// out first and added onto, beta 1); g.beta 1 accumulates onto out. An empty K (nothing to sum)
// leaves out = bias, or 0, or as it was with beta 1.
void forward_with_bias(const LaunchContext& ctx, GemmArgs g, Buf out, Buf bias, int M, int N, int K);
// linear_gelu_forward from its GEMM g (written for out): GELU_AUX[_BIAS] with pre as the aux matrix for
// a BF16 out where cuBLASLt takes it, else forward_with_bias into pre, then gelu_forward. With `amax`
// (F32, zeroed by the caller), amax[0] = the largest |out| (NaN if any is): folded into
// gelu_forward's stores on the unfused path; after the epilogue, one abs_max pass over out (not
// cuBLASLt's AMAX_D: fp8_gemm.cu says why).
void forward_gelu(const LaunchContext& ctx, GemmArgs g, Buf out, Buf pre, Buf bias, int M, int N, int K,
                  Buf amax = {});

}  // namespace ptrain::kernels::cuda
