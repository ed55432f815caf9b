// Elementwise arithmetic and dtype conversion on CUDA (see elementwise.cu). Semantics as ops.h.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

void add(const LaunchContext& ctx, Buf out, Buf a, Buf b, std::int64_t n);
void accumulate(const LaunchContext& ctx, Buf acc, Buf x, std::int64_t n);
void scale(const LaunchContext& ctx, Buf x, float factor, std::int64_t n);
void fill(const LaunchContext& ctx, Buf x, float value, std::int64_t n);
// fill_normal.cu
void fill_normal(const LaunchContext& ctx, Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key,
                 std::uint64_t first, std::uint64_t row_stride, float stddev);
void convert(const LaunchContext& ctx, Buf dst, Buf src, std::int64_t n);

}  // namespace ptrain::kernels::cuda
