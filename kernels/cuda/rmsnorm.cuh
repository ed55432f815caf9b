// RMSNorm over the last dim of [N, C] on CUDA, and the residual add fused with it (see rmsnorm.cu).
// Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void rmsnorm_forward(const LaunchContext& ctx, Buf out, Buf rstd, Buf in, Buf weight, int N, int C,
                     float eps, Buf amax = {});
void rmsnorm_backward(const LaunchContext& ctx, Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight,
                      Buf rstd, int N, int C);
void add_rmsnorm_forward(const LaunchContext& ctx, Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight,
                         int N, int C, float eps, Buf amax = {});

}  // namespace ptrain::kernels::cuda
