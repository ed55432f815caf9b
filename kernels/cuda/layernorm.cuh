// LayerNorm over the last dim of [N, C] on CUDA, and the residual add fused with it (see layernorm.cu).
// Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void layernorm_forward(const LaunchContext& ctx, Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias,
                       int N, int C, float eps, Buf amax = {});
void layernorm_backward(const LaunchContext& ctx, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                        Buf weight, Buf mean, Buf rstd, int N, int C);
void add_layernorm_forward(const LaunchContext& ctx, Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b,
                           Buf weight, Buf bias, int N, int C, float eps, Buf amax = {});

}  // namespace ptrain::kernels::cuda
