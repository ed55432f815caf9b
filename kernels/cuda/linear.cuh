// Linear layer on cuBLASLt, alone and with GELU fused into its epilogue (see linear.cu). Semantics as
// ops.h.
#pragma once

#include "kernels/buffer.h"
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

}  // namespace ptrain::kernels::cuda
