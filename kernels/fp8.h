// The two 8-bit float formats of FP8 training (OCP OFP8 v1.0) on the host: E4M3 (bias 7, no
// infinities, largest 448) for weights and activations, E5M2 (bias 15, IEEE-like, largest 57344) for
// gradients. Narrowing is the GPU's cvt.rn.satfinite: round to nearest even, anything beyond the
// largest finite value (infinities included) saturates to it with its sign, NaN gives 0x7F; so the
// CPU emulation and the CUDA casts agree bit for bit. Scales are powers of two (fp8_scale): scaling
// and unscaling are then exact, and a tensor is rounded once, by the cast.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/buffer.h"

// fp8_max and fp8_scale are the CUDA kernels' too (kernels/cuda/fp8.cu): one definition, the same
// scale on both sides.
#if defined(__CUDACC__)
#define PTRAIN_FP8_FN __host__ __device__ inline
#else
#define PTRAIN_FP8_FN inline
#endif

namespace ptrain::kernels {

enum class Fp8Format : std::uint8_t { E4M3, E5M2 };

// How a GPU's FP8 GEMM adds its products (ops.h fp8_gemm). Hopper's FP8 tensor cores add them in
// reduced precision (aligned to the largest exponent, about 14 bits kept). Promoted: those partial
// sums are added into FP32 every few steps along K (cuBLASLt's FAST_ACCUM 0; Transformer Engine's
// "split accumulator"). Fast: the tensor cores' accumulator holds the whole K (FAST_ACCUM 1): faster
// (1.1-1.2x a GEMM as measured in pytorch/ao issue 2377) and coarser. The CPU sums in FP32 either way.
enum class Fp8Sums : std::uint8_t { Promoted, Fast };

const char* to_string(Fp8Format format);

// The format of an FP8 buffer's codes (DType E4M3 or E5M2, kernels/buffer.h), and a format's dtype.
PTRAIN_FP8_FN constexpr bool is_fp8(DType t) { return t == DType::E4M3 || t == DType::E5M2; }
PTRAIN_FP8_FN constexpr Fp8Format fp8_format(DType t) { return t == DType::E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3; }
PTRAIN_FP8_FN constexpr DType fp8_dtype(Fp8Format format) {
  return format == Fp8Format::E5M2 ? DType::E5M2 : DType::E4M3;
}

// The largest finite value: 448 (E4M3), 57344 (E5M2).
PTRAIN_FP8_FN constexpr float fp8_max(Fp8Format format) { return format == Fp8Format::E4M3 ? 448.0f : 57344.0f; }

// value -> code, as the GPU's cvt.rn.satfinite.
std::uint8_t f32_to_fp8(float value, Fp8Format format);

// code -> value, exact (every FP8 value is a float).
float fp8_to_f32(std::uint8_t code, Fp8Format format);

// The scale a tensor whose largest magnitude is `amax` is multiplied by before its cast: the largest
// power of two s with amax * s <= fp8_max(format), within [2^-125, 2^125]. An amax of 0 (nothing
// to scale), or one that is not finite (the step is lost to NaN/inf anyway, and named as such),
// gives 1. (floor(log2(max / amax)) from the quotient in double: two floats' quotient rounded to 53
// bits crosses no power of two that the exact one does not, as floats have 24.)
PTRAIN_FP8_FN float fp8_scale(float amax, Fp8Format format) {
  if (!(amax > 0) || !(amax <= 3.40282347e38f)) return 1.0f;  // 0, NaN, infinity
  int exponent = 0;
  ::frexp(static_cast<double>(fp8_max(format)) / amax, &exponent);
  const int shift = exponent - 1 < -125 ? -125 : (exponent - 1 > 125 ? 125 : exponent - 1);
  return ::ldexpf(1.0f, shift);
}

// out[i] = f32_to_fp8(in[i] * scale) for i < n; returns the largest |in[i]| (NaN if any in[i] is
// NaN): the amax of the tensor, taken in the pass that casts it.
float cast_to_fp8(std::uint8_t* out, const float* in, std::int64_t n, float scale, Fp8Format format);

// The largest |in[i]| of n values, NaN if any is NaN.
float abs_max(const float* in, std::int64_t n);

}  // namespace ptrain::kernels
