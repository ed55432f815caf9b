// GELU (tanh approximation) and SwiGLU on CUDA (see activations.cu). Semantics as ops.h, amax
// included (gelu_forward's also serves fp8_gemm_gelu's unfused path, linear.cuh's forward_gelu).
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void gelu_forward(const LaunchContext& ctx, Buf out, Buf in, std::int64_t n, Buf amax = {});
void gelu_backward(const LaunchContext& ctx, Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax = {});
void swiglu_forward(const LaunchContext& ctx, Buf out, Buf gate, Buf up, std::int64_t n, Buf amax = {});
// amax: F32 [2], d_gate's then d_up's.
void swiglu_backward(const LaunchContext& ctx, Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up,
                     std::int64_t n, Buf amax = {});

}  // namespace ptrain::kernels::cuda
