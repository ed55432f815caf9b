// FP8 on the CPU (ops.h: abs_max, fp8_round): kernels/fp8.h's casts applied to F32 or BF16 tensors
// (BF16 staged, bf16_staging.h). The amax combines chunks in a fixed order, so it does not depend on
// the thread count (a max is exact anyway; NaN is kept whatever the order).
#include <cmath>
#include <vector>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void abs_max(Buf amax, Buf x, std::int64_t n, bool combine) {
  check_abs_max("cpu", amax, x, n);
  Bf16Staging staging;
  const float* p = cf32(staging.input(x, n));
  std::vector<float> partial(static_cast<std::size_t>((n + kParallelChunk - 1) / kParallelChunk));
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t count) {
    partial[static_cast<std::size_t>(begin / kParallelChunk)] = kernels::abs_max(p + begin, count);
  });
  if (combine) partial.push_back(*cf32(amax));
  *f32(amax) = kernels::abs_max(partial.data(), static_cast<std::int64_t>(partial.size()));
}

void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format) {
  check_fp8_round("cpu", out, x, amax, n);
  const float scale = fp8_scale(*cf32(amax), format);
  const float unscale = 1.0f / scale;  // exact: a power of two
  Bf16Staging staging;
  const float* in = cf32(staging.input(x, n));
  float* o = f32(staging.output(out, n));
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t count) {
    for (std::int64_t i = begin; i < begin + count; ++i)
      o[i] = fp8_to_f32(f32_to_fp8(in[i] * scale, format), format) * unscale;
  });
}

}  // namespace ptrain::kernels::cpu
