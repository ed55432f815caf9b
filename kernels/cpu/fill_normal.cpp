// fill_normal: Philox normals (philox_normal.h) into F32 rows, in parallel (chunks of one long row,
// or whole rows), each loop vectorised and multiversioned (isa.h). Compiled with -ffp-contract=off
// (kernels/CMakeLists.txt) so that every ISA, and the CUDA kernel, gives the same bits.
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/op_checks.h"
#include "kernels/philox_normal.h"

namespace ptrain::kernels::cpu {
namespace {

[[gnu::always_inline]] inline void fill_normal_body(float* x, std::int64_t n, std::uint64_t key,
                                                    std::uint64_t first, float stddev) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) x[i] = stddev * philox::normal_at(key, first + static_cast<std::uint64_t>(i));
}

PTRAIN_CPU_MULTIVERSION(fill_normal_kernel, fill_normal_body,
                        (float* x, std::int64_t n, std::uint64_t key, std::uint64_t first, float stddev),
                        (x, n, key, first, stddev))

}  // namespace

void fill_normal(Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key, std::uint64_t first,
                 std::uint64_t row_stride, float stddev) {
  check_fill_normal("cpu", x, rows, cols);
  float* out = f32(x);
  if (rows == 1) {
    parallel_chunks(cols, [&](std::int64_t i, std::int64_t len) {
      fill_normal_kernel(out + i, len, key, first + static_cast<std::uint64_t>(i), stddev);
    });
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements)
  for (std::int64_t r = 0; r < rows; ++r)
    fill_normal_kernel(out + r * cols, cols, key, first + static_cast<std::uint64_t>(r) * row_stride, stddev);
}

}  // namespace ptrain::kernels::cpu
