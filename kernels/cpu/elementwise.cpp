// Elementwise arithmetic over n values: add, accumulate, scale, fill, and the dtype conversion.
// Memory-bound; vectorised and, above kParallelMinElements, split evenly over the OpenMP threads.
// out may alias a or b exactly. BF16 buffers are staged (bf16_staging.h).
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void add(Buf out, Buf a, Buf b, std::int64_t n) {
  check_add("cpu", out, a, b, n);
  Bf16Staging staging;
  float* o = f32(staging.output(out, n));
  const float* x = cf32(staging.input(a, n));
  const float* y = cf32(staging.input(b, n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void accumulate(Buf acc, Buf x, std::int64_t n) {
  check_accumulate("cpu", acc, x, n);
  Bf16Staging staging;
  float* a = f32(staging.output(acc, n));
  const float* v = cf32(staging.input(x, n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) a[i] += v[i];
}

void scale(Buf x, float factor, std::int64_t n) {
  check_scale("cpu", x, n);
  Bf16Staging staging;
  float* p = f32(staging.output(x, n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) p[i] *= factor;
}

void fill(Buf x, float value, std::int64_t n) {
  check_fill("cpu", x, n);
  Bf16Staging staging;
  float* p = f32(staging.output(x, n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) p[i] = value;
}

void convert(Buf dst, Buf src, std::int64_t n) {
  check_convert("cpu", dst, src, n);
  if (dst.dtype == src.dtype) {
    if (n > 0) std::memcpy(dst.ptr, src.ptr, static_cast<std::size_t>(n) * dtype_size(dst.dtype));
  } else if (dst.dtype == DType::BF16) {
    round_to_bf16(dst.as<std::uint16_t>(), cf32(src), n);
  } else {
    widen_bf16(f32(dst), src.as<const std::uint16_t>(), n);
  }
}

}  // namespace ptrain::kernels::cpu
