// Counter-based hashing for the data pipeline (internal to data/): stateless, so any sample or
// permutation entry is computed from its coordinates alone, which keeps data order a pure function
// of (seed, position) and makes resuming free.
#pragma once

#include <cstdint>

namespace ptrain::data::detail {

// The splitmix64 finaliser: a bijective 64-bit mix with full avalanche.
inline constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A hash of (key, a, b); each word is mixed in turn, so (a, b) and (b, a) differ.
inline constexpr std::uint64_t hash3(std::uint64_t key, std::uint64_t a, std::uint64_t b) {
  std::uint64_t h = mix64(key + 0x9e3779b97f4a7c15ULL);
  h = mix64(h ^ (a + 0x632be59bd9b4e019ULL));
  h = mix64(h ^ (b + 0x85157af5ULL));
  return h;
}

}  // namespace ptrain::data::detail
