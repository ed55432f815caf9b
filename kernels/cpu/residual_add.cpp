// The fused add + norm ops' residual add (see residual_add.h).
#include "kernels/cpu/residual_add.h"

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ptrain::kernels::cpu {

ResidualAdd::ResidualAdd(Bf16Staging& staging, Buf x_out, Buf a, Buf b, std::int64_t n)
    : sums_(f32(staging.output(x_out, n))),
      a_(cf32(staging.input(a, n))),
      b_(cf32(staging.input(b, n))),
      bf16_sums_(x_out.dtype == DType::BF16) {}

void ResidualAdd::apply(std::int64_t begin, std::int64_t count) const {
  float* s = sums_ + begin;
  const float* x = a_ + begin;
  const float* y = b_ + begin;
  // s may be x or y (x_out aliasing a or b): element for element, as add allows.
  if (bf16_sums_) {
#pragma omp simd
    for (std::int64_t i = 0; i < count; ++i) s[i] = bf16_to_f32(f32_to_bf16(x[i] + y[i]));
  } else {
#pragma omp simd
    for (std::int64_t i = 0; i < count; ++i) s[i] = x[i] + y[i];
  }
}

}  // namespace ptrain::kernels::cpu
