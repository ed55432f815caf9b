// AdamW over a flat F32 range on CUDA (see adamw.cu). Semantics as ops.h.
#pragma once

#include <cstdint>

#include "kernels/adamw_step.h"
#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void adamw_step(const LaunchContext& ctx, Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                const AdamWStep& s);

}  // namespace ptrain::kernels::cuda
