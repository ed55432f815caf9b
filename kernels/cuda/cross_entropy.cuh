// Softmax cross-entropy fused with its gradient on CUDA (see cross_entropy.cu). Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

// Synchronises the stream once (to check targets on the host) and throws std::invalid_argument if
// some target >= V; the outputs are then unspecified.
void cross_entropy_forward_backward(const LaunchContext& ctx, Buf losses, Buf d_logits, Buf logits,
                                    Buf targets, int N, int V, int Vp, float grad_scale);

}  // namespace ptrain::kernels::cuda
