// Rotary position embedding on CUDA (see rope.cu). Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void rope_forward(const LaunchContext& ctx, Buf x, int B, int T, int H, int D, float theta, int pos0);
void rope_backward(const LaunchContext& ctx, Buf d_x, int B, int T, int H, int D, float theta, int pos0);

}  // namespace ptrain::kernels::cuda
