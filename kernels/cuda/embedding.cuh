// Token (+ learned position) embedding on CUDA (see embedding.cu). Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void embedding_forward(const LaunchContext& ctx, Buf out, Buf tokens, Buf table, Buf positions, int N, int T,
                       int C);
void embedding_backward(const LaunchContext& ctx, Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N,
                        int T, int C);

}  // namespace ptrain::kernels::cuda
