// Branch-free float math that GCC/Clang vectorise inside `#pragma omp simd` loops (libm's expf is a
// scalar calls without -ffast-math, which this project does not use). Plain IEEE
// arithmetic, no reassociation: results are the same on every run and thread count.
//
// exp_f32: Cody-Waite range reduction x = k ln2 + r, |r| <= ln2/2, a degree-7 Taylor polynomial
// for e^r (truncation error < 1e-8 relative) and 2^k built in the exponent bits; within ~2 ulp of
// expf. Deviations from expf, all irrelevant where it is used (softmax, sigmoid): results
// below FLT_MIN are flushed to 0 and x > 88.37 (expf overflows at 88.72) gives +inf. NaN -> NaN.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace ptrain::kernels::cpu {

[[gnu::always_inline]] inline float exp_f32(float x) {
  constexpr float kLo = -87.33654f;  // e^kLo ~ FLT_MIN: k >= -126
  constexpr float kHi = 88.37f;      // k <= 127
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln2 split so that k * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float t = xc * kLog2e + kShifter;  // low mantissa bits of t hold round(x log2e)
  const float k = t - kShifter;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k: the integer in t's low bits plus the exponent bias, moved into the exponent field.
  const std::uint32_t biased = std::bit_cast<std::uint32_t>(t) - 0x4B400000u + 127u;
  const float two_k = std::bit_cast<float>(biased << 23);
  const float y = p * two_k;
  return x < kLo ? 0.0f : (x > kHi ? std::numeric_limits<float>::infinity() : y);
}

// 1 / (1 + e^{-x})
[[gnu::always_inline]] inline float sigmoid_f32(float x) {
  return 1.0f / (1.0f + exp_f32(-x));
}

}  // namespace ptrain::kernels::cpu
