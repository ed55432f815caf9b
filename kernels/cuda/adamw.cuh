// AdamW over a flat F32 range on CUDA (see adamw.cu). Semantics as ops.h.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void adamw_step(const LaunchContext& ctx, Buf param, Buf grad, Buf m, Buf v, std::int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int step);

}  // namespace ptrain::kernels::cuda
