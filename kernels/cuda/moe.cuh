// Mixture-of-experts routing, dispatch and combine on CUDA (see moe.cu). Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void moe_route(const LaunchContext& ctx, Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits,
               int B, int T, int E, int k, int capacity, int first_expert, int experts_here);
void moe_route_backward(const LaunchContext& ctx, Buf d_logits, Buf d_weight, Buf probs, Buf choice,
                        Buf weight, Buf counts, int B, int T, int E, int k, float aux_scale);
void moe_scatter(const LaunchContext& ctx, Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight,
                 int N, int k, int R, int C);
void moe_combine(const LaunchContext& ctx, Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C);

}  // namespace ptrain::kernels::cuda
