// GELU (tanh approximation) and SwiGLU on CUDA (see activations.cu). Semantics as ops.h.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void gelu_forward(const LaunchContext& ctx, Buf out, Buf in, std::int64_t n);
void gelu_backward(const LaunchContext& ctx, Buf d_in, Buf d_out, Buf in, std::int64_t n);
void swiglu_forward(const LaunchContext& ctx, Buf out, Buf gate, Buf up, std::int64_t n);
void swiglu_backward(const LaunchContext& ctx, Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up,
                     std::int64_t n);

}  // namespace ptrain::kernels::cuda
