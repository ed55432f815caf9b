#include "kernels/fp8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace ptrain::kernels {
namespace {

struct Layout {
  int mantissa_bits;
  int bias;
  float max;
  std::uint8_t max_code;  // of the largest finite value
};

constexpr Layout layout(Fp8Format format) {
  return format == Fp8Format::E4M3 ? Layout{3, 7, fp8_max(format), 0x7E} : Layout{2, 15, fp8_max(format), 0x7B};
}

constexpr std::uint8_t kNaN = 0x7F;

// The largest magnitude seen, NaN once a NaN was seen (std::max would drop it).
struct AbsMax {
  float max = 0;
  bool nan = false;
  void add(float x) {
    const float magnitude = std::fabs(x);
    nan = nan || std::isnan(magnitude);
    max = std::max(max, magnitude);
  }
  float value() const { return nan ? NAN : max; }
};

// Every code's value, from the format's definition.
std::array<float, 256> decode_table(Fp8Format format) {
  const Layout l = layout(format);
  std::array<float, 256> out{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code & 0x7F) >> l.mantissa_bits;
    const int mantissa = code & ((1 << l.mantissa_bits) - 1);
    const int top_exponent = (1 << (7 - l.mantissa_bits)) - 1;
    float v = 0;
    if (format == Fp8Format::E4M3 && exponent == top_exponent && mantissa == 7)
      v = NAN;
    else if (format == Fp8Format::E5M2 && exponent == top_exponent)
      v = mantissa == 0 ? INFINITY : NAN;
    else if (exponent == 0)
      v = std::ldexp(static_cast<float>(mantissa), 1 - l.bias - l.mantissa_bits);
    else
      v = std::ldexp(static_cast<float>(mantissa + (1 << l.mantissa_bits)), exponent - l.bias - l.mantissa_bits);
    out[static_cast<std::size_t>(code)] = (code & 0x80) ? -v : v;
  }
  return out;
}

}  // namespace

const char* to_string(Fp8Format format) { return format == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

std::uint8_t f32_to_fp8(float value, Fp8Format format) {
  const Layout l = layout(format);
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return kNaN;
  if (std::bit_cast<float>(magnitude) >= l.max) return sign | l.max_code;  // saturate, infinity too
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent < 1 - l.bias) {
    // Below the smallest normal: multiples of the smallest subnormal, counted by the code itself (a
    // count of 2^m is the smallest normal's code). The scaling by a power of two is exact.
    const double units = std::ldexp(static_cast<double>(std::bit_cast<float>(magnitude)), l.bias - 1 + l.mantissa_bits);
    return sign | static_cast<std::uint8_t>(std::nearbyint(units));
  }
  // Keep the top m mantissa bits, rounding the dropped ones to nearest even; a carry runs into the
  // exponent, as it must. Then rebias the exponent.
  const int dropped = 23 - l.mantissa_bits;
  const std::uint32_t half = (1u << (dropped - 1)) - 1u + ((magnitude >> dropped) & 1u);
  const std::uint32_t kept = (magnitude + half) >> dropped;
  return sign | static_cast<std::uint8_t>(kept - (static_cast<std::uint32_t>(127 - l.bias) << l.mantissa_bits));
}

float fp8_to_f32(std::uint8_t code, Fp8Format format) {
  static const std::array<float, 256> e4m3 = decode_table(Fp8Format::E4M3);
  static const std::array<float, 256> e5m2 = decode_table(Fp8Format::E5M2);
  return (format == Fp8Format::E4M3 ? e4m3 : e5m2)[code];
}

float cast_to_fp8(std::uint8_t* out, const float* in, std::int64_t n, float scale, Fp8Format format) {
  AbsMax amax;
  for (std::int64_t i = 0; i < n; ++i) {
    amax.add(in[i]);
    out[i] = f32_to_fp8(in[i] * scale, format);
  }
  return amax.value();
}

float abs_max(const float* in, std::int64_t n) {
  AbsMax amax;
  for (std::int64_t i = 0; i < n; ++i) amax.add(in[i]);
  return amax.value();
}

}  // namespace ptrain::kernels
