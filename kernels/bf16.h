// bf16 <-> f32 on the host, for everything that touches bf16 bits outside a device kernel (the CPU
// ops, checkpoints, tests). bf16 is the upper half of an f32, so widening is exact; narrowing rounds
// to nearest even, as the GPU's __float2bfloat16 does, so host and device agree bit for bit on every
// non-NaN value.
#pragma once

#include <bit>
#include <cstdint>

namespace ptrain::kernels {

inline float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(std::uint32_t{bits} << 16);
}

// Round to nearest even; infinities stay, overflow goes to infinity, NaN stays NaN (quieted: the
// rounding add could otherwise carry a NaN's payload into the exponent and make it infinite).
inline std::uint16_t f32_to_bf16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

}  // namespace ptrain::kernels
