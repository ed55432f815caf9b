// Reductions: sum of squares (gradient-norm clipping) and column sums (bias / norm-weight grads).
// Both sum in double over fixed chunks combined in a fixed order, so the result does not depend on
// the number of threads. sum_squares takes F32 or BF16 (staged, bf16_staging.h), as on CUDA.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void column_sums_accumulate(float* sums, const float* rows, std::int64_t R, std::int64_t C) {
  constexpr std::int64_t kChunk = 256;
  const std::int64_t chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (R * C >= kParallelMinElements)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t c0 = chunk * kChunk;
    const std::int64_t width = std::min(kChunk, C - c0);
    double acc[kChunk] = {};
    for (std::int64_t r = 0; r < R; ++r) {
      const float* row = rows + r * C + c0;
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) acc[c] += row[c];
    }
    for (std::int64_t c = 0; c < width; ++c) sums[c0 + c] += static_cast<float>(acc[c]);
  }
}

double sum_squares(Buf x, std::int64_t n) {
  check_sum_squares("cpu", x, n);
  Bf16Staging staging;
  const float* p = cf32(staging.input(x, n));
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks));
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t begin = chunk * kChunk;
    const std::int64_t end = std::min(n, begin + kChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t i = begin; i < end; ++i) {
      const double v = p[i];
      s += v * v;
    }
    partial[static_cast<std::size_t>(chunk)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace ptrain::kernels::cpu
