// Reductions to one F32 value in device memory on CUDA (see reduce.cu). Semantics as ops.h.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void sum(const LaunchContext& ctx, Buf out, Buf x, std::int64_t n);
void sum_squares(const LaunchContext& ctx, Buf out, Buf x, std::int64_t n);

}  // namespace ptrain::kernels::cuda
