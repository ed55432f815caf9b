// Rotary position embedding, HF "rotate half" convention, in place on x[B, T, H, D]:
//   inv_freq_i = theta^(-2i/D), angle = (pos0 + t) * inv_freq_i, for i < D/2
//   x_i' = x_i cos - x_{i+D/2} sin,   x_{i+D/2}' = x_{i+D/2} cos + x_i sin
// which is HF's q * cos + rotate_half(q) * sin with cos/sin = cat(freqs, freqs). The angles follow
// HF's float32 arithmetic (float exponent, float product of position and inv_freq); cos and sin of
// that float angle are taken in double and rounded, so any pos0 split (context parallelism, KV
// offsets) gives the same bits. Backward applies the inverse rotation (angle -> -angle) to the
// gradient, the transpose of an orthogonal map. x is F32 or BF16 (staged, bf16_staging.h), as on
// CUDA.
#include <cmath>
#include <cstdint>
#include <memory>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
void rope_apply(Buf x_buf, int B, int T, int H, int D, float theta, int pos0, float sign) {
  const std::int64_t half = D / 2;
  const std::int64_t rows = std::int64_t{B} * T;
  if (rows == 0 || H == 0 || half == 0) return;
  // cos/sin tables [T, D/2].
  auto cos_t = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(T * half));
  auto sin_t = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(T * half));
  auto inv_freq = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
#pragma omp parallel for schedule(static) if (T * half >= 4096)
  for (std::int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(std::int64_t{pos0} + t);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos * inv_freq[i]);
      cos_t[t * half + i] = static_cast<float>(std::cos(angle));
      sin_t[t * half + i] = sign * static_cast<float>(std::sin(angle));
    }
  }
  const std::int64_t row_len = std::int64_t{H} * D;
  Bf16Staging staging;
  float* x_all = f32(staging.output(x_buf, rows * row_len));
#pragma omp parallel for schedule(static) if (rows * row_len >= kParallelMinElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = r % T;
    const float* c = cos_t.get() + t * half;
    const float* s = sin_t.get() + t * half;
    for (std::int64_t h = 0; h < H; ++h) {
      float* lo = x_all + r * row_len + h * D;
      float* hi = lo + half;
#pragma omp simd
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = lo[i];
        const float b = hi[i];
        lo[i] = a * c[i] - b * s[i];
        hi[i] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace

void rope_forward(Buf x, int B, int T, int H, int D, float theta, int pos0) {
  check_rope_forward("cpu", x, B, T, H, D, theta);
  rope_apply(x, B, T, H, D, theta, pos0, 1.0f);
}

void rope_backward(Buf d_x, int B, int T, int H, int D, float theta, int pos0) {
  check_rope_backward("cpu", d_x, B, T, H, D, theta);
  rope_apply(d_x, B, T, H, D, theta, pos0, -1.0f);
}

}  // namespace ptrain::kernels::cpu
