// Reductions returned to the host on CUDA (see reduce.cu). Semantics as ops.h.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

// Synchronises the stream to hand the result to the host (ops.h: the value is returned).
double sum_squares(const LaunchContext& ctx, Buf x, std::int64_t n);

}  // namespace ptrain::kernels::cuda
