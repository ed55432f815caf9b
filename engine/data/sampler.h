// Sampler: the order in which samples are consumed, a pure function of (seed, position).
//
// Positions 0, 1, 2, ... index an infinite sequence made of epochs of num_samples positions each;
// position p lies in epoch e = p / S at offset i = p % S (S = num_samples) and yields
//   shuffle = false:  sample i                   (file order)
//   shuffle = true:   sample perm_{seed,e}(i)    (a pseudo-random permutation of [0, S))
// perm is a keyed bijection computed on the fly: a 6-round balanced Feistel network over
// [0, 2^b) (b = the bits of S - 1 rounded up to even, >= 2) keyed by hash(seed, e, round),
// with cycle-walking back into [0, S) (on average fewer than 4 applications). Nothing is stored,
// so the cost per position is constant for any S, and resuming needs only the position
// (= consumed samples).
#pragma once

#include <cstdint>

namespace ptrain::data {

class Sampler {
 public:
  // num_samples >= 1; throws std::invalid_argument otherwise.
  Sampler(std::int64_t num_samples, std::uint64_t seed, bool shuffle);

  std::int64_t num_samples() const { return num_samples_; }
  std::uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }

  // The sample at `position` (>= 0) of the infinite epoch-concatenated order.
  std::int64_t sample_at(std::int64_t position) const;
  // Offset i -> sample within epoch `epoch` (the permutation itself; identity without shuffle).
  std::int64_t permute(std::int64_t epoch, std::int64_t i) const;

 private:
  std::int64_t num_samples_;
  std::uint64_t seed_;
  bool shuffle_;
  int half_bits_ = 1;  // the Feistel halves; domain = 2^(2 * half_bits_)
};

}  // namespace ptrain::data
