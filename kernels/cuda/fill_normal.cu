// fill_normal: Philox normals (philox_normal.h) into F32 rows, one element a thread (grid-stride); the same bits
// as the CPU's (the header's arithmetic is rounded step by step, __dmul_rn/__dadd_rn/__dsqrt_rn).
#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"
#include "kernels/philox_normal.h"

namespace ptrain::kernels::cuda {
namespace {

struct FillNormal {
  float* x;
  std::int64_t cols;
  std::uint64_t key;
  std::uint64_t first;
  std::uint64_t row_stride;
  float stddev;
  __device__ void operator()(std::int64_t i) const {
    const std::uint64_t r = static_cast<std::uint64_t>(i / cols), c = static_cast<std::uint64_t>(i % cols);
    x[i] = __fmul_rn(stddev, philox::normal_at(key, first + r * row_stride + c));
  }
};

}  // namespace

void fill_normal(const LaunchContext& ctx, Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key,
                 std::uint64_t first, std::uint64_t row_stride, float stddev) {
  check_fill_normal("cuda", x, rows, cols);
  launch_map(ctx.stream, rows * cols, FillNormal{typed<float>(x), cols, key, first, row_stride, stddev});
}

}  // namespace ptrain::kernels::cuda
