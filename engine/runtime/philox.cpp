#include "engine/runtime/philox.h"

#include "kernels/philox_normal.h"

namespace ptrain::runtime {
namespace {

// 24 random bits -> float in [0, 1), exactly representable.
float unit_float(std::uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

}  // namespace

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  kernels::philox::rounds(c[0], c[1], c[2], c[3], k[0], k[1]);
  return c;
}

std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

PhiloxKey stream_key(std::uint64_t seed, std::uint64_t stream) {
  // Two different 64-bit values go into the 64-bit key: fold them through one Philox block so
  // nearby seeds and streams give unrelated keys.
  const PhiloxCounter mixed = philox4x32(
      {static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32), 0x7074u, 0x7261u},
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return {mixed[0], mixed[1]};
}

float uniform_at(PhiloxKey key, std::uint64_t index) {
  const PhiloxCounter r =
      philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 1u, 0u}, key);
  return unit_float(r[0]);
}

}  // namespace ptrain::runtime
