// FP8 on CUDA (ops.h: abs_max, fp8_round; the numerics of kernels/fp8.h, see fp8.cu).
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/fp8.h"

namespace ptrain::kernels::cuda {

void abs_max(const LaunchContext& ctx, Buf amax, Buf x, std::int64_t n, bool combine);
void fp8_round(const LaunchContext& ctx, Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format);

}  // namespace ptrain::kernels::cuda
