// Reductions: sum and sum of squares (token losses, gradient-norm clipping) and column sums (bias /
// norm-weight grads). All sum in double over fixed chunks combined in a fixed order, so the result
// does not depend on the number of threads. sum and sum_squares take F32 or BF16 (staged,
// bf16_staging.h), as on CUDA.
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

namespace {

// out[0] = the sum of term(x[i]) over n elements: chunks summed in double, combined in order.
template <typename Term>
void reduce(const char* op, Buf out, Buf x, std::int64_t n, Term term) {
  check_reduction("cpu", op, out, x, n);
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
    for (std::int64_t i = begin; i < end; ++i) s += term(static_cast<double>(p[i]));
    partial[static_cast<std::size_t>(chunk)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  *f32(out) = static_cast<float>(total);
}

}  // namespace

void sum(Buf out, Buf x, std::int64_t n) {
  reduce("sum", out, x, n, [](double v) { return v; });
}

void sum_squares(Buf out, Buf x, std::int64_t n) {
  reduce("sum_squares", out, x, n, [](double v) { return v * v; });
}

}  // namespace ptrain::kernels::cpu
