#include "engine/data/sampler.h"

#include <bit>
#include <stdexcept>
#include <string>

#include "engine/data/counter_hash.h"

namespace ptrain::data {

namespace {

constexpr int kFeistelRounds = 6;

}  // namespace

Sampler::Sampler(std::int64_t num_samples, std::uint64_t seed, bool shuffle)
    : num_samples_(num_samples), seed_(seed), shuffle_(shuffle) {
  if (num_samples < 1) {
    throw std::invalid_argument("Sampler: num_samples must be >= 1, got " + std::to_string(num_samples));
  }
  // Bits needed for offsets 0 .. S-1, rounded up to an even count so both halves are equal.
  const int bits = std::bit_width(static_cast<std::uint64_t>(num_samples - 1));
  half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;
}

std::int64_t Sampler::permute(std::int64_t epoch, std::int64_t i) const {
  if (!shuffle_ || num_samples_ == 1) return i;
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t keys[kFeistelRounds];
  for (int r = 0; r < kFeistelRounds; ++r) {
    keys[r] = detail::hash3(seed_, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(r));
  }
  auto x = static_cast<std::uint64_t>(i);
  // Cycle-walking: the Feistel network permutes [0, 2^(2h)); applying it until the value falls in
  // [0, S) restricts it to a permutation of [0, S) (the walk stays on x's cycle, which re-enters it).
  do {
    std::uint64_t left = x >> half_bits_;
    std::uint64_t right = x & mask;
    for (int r = 0; r < kFeistelRounds; ++r) {
      const std::uint64_t f = detail::mix64(right ^ keys[r]) & mask;
      const std::uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<std::uint64_t>(num_samples_));
  return static_cast<std::int64_t>(x);
}

std::int64_t Sampler::sample_at(std::int64_t position) const {
  if (position < 0)
    throw std::out_of_range("Sampler::sample_at: negative position " + std::to_string(position));
  return permute(position / num_samples_, position % num_samples_);
}

}  // namespace ptrain::data
