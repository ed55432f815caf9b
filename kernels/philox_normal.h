// Counter-based normal samples that every backend computes bit for bit alike: Philox4x32-10 (Salmon
// et al. 2011, "Parallel random numbers: as easy as 1, 2, 3") on the counter (index, 0), then
// Box-Muller on its first two words, in double precision from integer operations, +, *, / and sqrt
// only (all correctly rounded in IEEE arithmetic, on a CPU and in CUDA alike). libm's log and cos
// are not used: the host's and the device's differ in their last bits, and these samples are the
// initial weights, which must not depend on where they were drawn.
//   log: u1 = (r0 + 1) 2^-32 = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s),
//        s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^21 (truncation below 2^-56).
//   cos: 2 pi r1 2^-32 = q pi/2 + x, q the nearest quarter turn (an integer from r1's top bits),
//        |x| <= pi/4, so cos is +-cos x or +-sin x, each a Taylor polynomial to x^16 / x^17
//        (truncation below 2^-60).
// The result is within one float rounding of float(sqrt(-2 log u1) cos(2 pi u2)) as libm computes it
// (tests/kernels/fill_normal_test.cpp counts the differences).
//
// Host code that includes this must be compiled with -ffp-contract=off (kernels/CMakeLists.txt sets
// it for kernels/cpu/fill_normal.cpp, the one host user): a fused multiply-add rounds once where
// CUDA, told so by __dmul_rn/__dadd_rn, rounds twice. Branch-free, so `#pragma omp simd` vectorises it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PTRAIN_PHILOX_FN __host__ __device__ __forceinline__
#else
#define PTRAIN_PHILOX_FN [[gnu::always_inline]] inline
#endif

namespace ptrain::kernels::philox {

// Ten rounds over one 128-bit counter, key (k0, k1).
PTRAIN_PHILOX_FN void rounds(std::uint32_t& c0, std::uint32_t& c1, std::uint32_t& c2, std::uint32_t& c3,
                             std::uint32_t k0, std::uint32_t k1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#elif !defined(__CUDACC__)  // (nvcc's host pass knows neither pragma)
#pragma GCC unroll 10  // a straight line, which `omp simd` vectorises (a loop inside it is not)
#endif
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<std::uint32_t>(p1);
    c3 = static_cast<std::uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// a * b, a + b and sqrt(x), each rounded on its own (never fused into one rounding).
PTRAIN_PHILOX_FN double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
PTRAIN_PHILOX_FN double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

PTRAIN_PHILOX_FN double bits_to_double(std::uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  return __builtin_bit_cast(double, bits);
#endif
}
PTRAIN_PHILOX_FN std::uint64_t double_to_bits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return __builtin_bit_cast(std::uint64_t, x);
#endif
}

PTRAIN_PHILOX_FN double root(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return __builtin_sqrt(x);  // sqrtsd: with -fno-math-errno no libm call
#endif
}

// A 32-bit word as a double, exactly (2^52 + w, less 2^52).
PTRAIN_PHILOX_FN double word_to_double(std::uint32_t w) {
  return add(bits_to_double(0x4330000000000000ull | w), -4503599627370496.0);
}

// log((r0 + 1) 2^-32), in (-22.2, 0].
PTRAIN_PHILOX_FN double log_unit(std::uint32_t r0) {
  const double n = add(word_to_double(r0), 1.0);  // in [1, 2^32], exact
  const std::uint64_t bits = double_to_bits(n);
  const double m1 = bits_to_double((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  const bool halve = m1 > 1.4142135623730951;
  const double m = halve ? mul(m1, 0.5) : m1;
  const double e = word_to_double(static_cast<std::uint32_t>(bits >> 52) - 1023u + (halve ? 1u : 0u));
  const double s = add(m, -1.0) / add(m, 1.0);
  const double z = mul(s, s);
  double p = 1.0 / 21.0;
  p = add(mul(p, z), 1.0 / 19.0);
  p = add(mul(p, z), 1.0 / 17.0);
  p = add(mul(p, z), 1.0 / 15.0);
  p = add(mul(p, z), 1.0 / 13.0);
  p = add(mul(p, z), 1.0 / 11.0);
  p = add(mul(p, z), 1.0 / 9.0);
  p = add(mul(p, z), 1.0 / 7.0);
  p = add(mul(p, z), 1.0 / 5.0);
  p = add(mul(p, z), 1.0 / 3.0);
  p = add(mul(p, z), 1.0);
  const double log_m = mul(mul(2.0, s), p);
  return add(mul(add(e, -32.0), 0.69314718055994530942), log_m);
}

// cos(2 pi r1 2^-32).
PTRAIN_PHILOX_FN double cos_turn(std::uint32_t r1) {
  const std::uint32_t t = r1 + (1u << 29);  // wraps: past the last quarter is the first
  const std::uint32_t q = t >> 30;
  const double f = add(word_to_double(t & 0x3FFFFFFFu), -536870912.0);  // in [-2^29, 2^29)
  const double x = mul(f, 3.14159265358979323846 / 2147483648.0);      // f pi / 2^31, |x| <= pi/4
  const double x2 = mul(x, x);
  double c = 1.0 / 20922789888000.0;  // 1/16!
  c = add(mul(c, x2), -1.0 / 87178291200.0);
  c = add(mul(c, x2), 1.0 / 479001600.0);
  c = add(mul(c, x2), -1.0 / 3628800.0);
  c = add(mul(c, x2), 1.0 / 40320.0);
  c = add(mul(c, x2), -1.0 / 720.0);
  c = add(mul(c, x2), 1.0 / 24.0);
  c = add(mul(c, x2), -0.5);
  c = add(mul(c, x2), 1.0);
  double s = 1.0 / 355687428096000.0;  // 1/17!
  s = add(mul(s, x2), -1.0 / 1307674368000.0);
  s = add(mul(s, x2), 1.0 / 6227020800.0);
  s = add(mul(s, x2), -1.0 / 39916800.0);
  s = add(mul(s, x2), 1.0 / 362880.0);
  s = add(mul(s, x2), -1.0 / 5040.0);
  s = add(mul(s, x2), 1.0 / 120.0);
  s = add(mul(s, x2), -1.0 / 6.0);
  s = add(mul(s, x2), 1.0);
  s = mul(s, x);
  const double even = (q & 1u) == 0u ? c : s;           // q 0: cos x, 1: -sin x, 2: -cos x, 3: sin x
  return (q == 1u || q == 2u) ? -even : even;
}

// Standard normal sample number `index` of the stream `key` (k0 in the low 32 bits, k1 in the high).
PTRAIN_PHILOX_FN float normal_at(std::uint64_t key, std::uint64_t index) {
  std::uint32_t c0 = static_cast<std::uint32_t>(index), c1 = static_cast<std::uint32_t>(index >> 32), c2 = 0, c3 = 0;
  rounds(c0, c1, c2, c3, static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
  return static_cast<float>(mul(root(mul(-2.0, log_unit(c0))), cos_turn(c1)));
}

}  // namespace ptrain::kernels::philox
