#include "engine/runtime/philox.h"

#include <cmath>

namespace ptrain::runtime {
namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
}

// 24 random bits -> float in [0, 1), exactly representable.
float unit_float(std::uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

}  // namespace

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k = {k[0] + kWeyl0, k[1] + kWeyl1};
  }
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

float normal_at(PhiloxKey key, std::uint64_t index) {
  const PhiloxCounter r =
      philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u}, key);
  // Box-Muller with u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2));
}

float uniform_at(PhiloxKey key, std::uint64_t index) {
  const PhiloxCounter r =
      philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 1u, 0u}, key);
  return unit_float(r[0]);
}

}  // namespace ptrain::runtime
