// Elementwise arithmetic over n floats: add, accumulate, scale, fill. Memory-bound; vectorised and,
// above kParallelMinElements, split evenly over the OpenMP threads. out may alias a or b exactly.
#include <cstdint>

#include "kernels/cpu/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ptrain::kernels::cpu {

void add(Buf out, Buf a, Buf b, std::int64_t n) {
  constexpr const char* op = "add";
  require_sizes(op, {n});
  require_buf(op, "out", out, DType::F32, n);
  require_buf(op, "a", a, DType::F32, n);
  require_buf(op, "b", b, DType::F32, n);
  float* o = f32(out);
  const float* x = cf32(a);
  const float* y = cf32(b);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void accumulate(Buf acc, Buf x, std::int64_t n) {
  constexpr const char* op = "accumulate";
  require_sizes(op, {n});
  require_buf(op, "acc", acc, DType::F32, n);
  require_buf(op, "x", x, DType::F32, n);
  float* a = f32(acc);
  const float* v = cf32(x);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) a[i] += v[i];
}

void scale(Buf x, float factor, std::int64_t n) {
  constexpr const char* op = "scale";
  require_sizes(op, {n});
  require_buf(op, "x", x, DType::F32, n);
  float* p = f32(x);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) p[i] *= factor;
}

void fill(Buf x, float value, std::int64_t n) {
  constexpr const char* op = "fill";
  require_sizes(op, {n});
  require_buf(op, "x", x, DType::F32, n);
  float* p = f32(x);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) p[i] = value;
}

}  // namespace ptrain::kernels::cpu
