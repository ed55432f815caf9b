// SyntheticDataset: a generated, learnable token family for runs without data files
// (data.format: synthetic), tests and throughput measurements.
//
// Definition. Let A = min(vocab, 1024) (the alphabet) and h(lane) = hash3(seed ^ stream, index,
// lane), a counter-based 64-bit hash (splitmix64 finaliser, engine/data/counter_hash.h). Sample
// `index` is the arithmetic progression
//     token[j] = (start + j * stride) mod A,   j = 0 .. T,
//     start  = h(0) mod A,   stride = 1 + h(1) mod 8.
// Nothing is stored; any sample is computed from (seed, stream, index) alone.
//
// Why it is learnable: given token 0 the next token is one of 8 (the stride), and from token 1 on
// every token follows from the previous two. The best achievable mean cross-entropy over the T
// targets is therefore ln(8) / T (0.0162 nats for T = 128), against ln(A) for a uniform guess;
// a small model gets well below ln(A) within a few hundred steps.
//
// The count is fixed (default 2^40 samples, effectively infinite, so an "epoch" never ends).
// `stream` separates splits: 0 = train, 1 = validation (a held-out set of progressions).
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/token_source.h"

namespace ptrain::data {

class SyntheticDataset final : public TokenSource {
 public:
  static constexpr std::int64_t kDefaultSamples = std::int64_t{1} << 40;
  static constexpr int kMaxAlphabet = 1024;
  static constexpr int kStrides = 8;
  static constexpr std::uint64_t kTrainStream = 0;
  static constexpr std::uint64_t kValidStream = 1;

  SyntheticDataset(int seq_len, int vocab, std::uint64_t seed, std::uint64_t stream = kTrainStream,
                   std::int64_t num_samples = kDefaultSamples);

  int alphabet() const { return alphabet_; }
  // The progression of sample `index`: token[j] = (start + j * stride) mod alphabet().
  struct Progression {
    std::int64_t start;
    std::int64_t stride;
  };
  Progression progression(std::int64_t index) const;

  std::int64_t num_samples() const override { return num_samples_; }
  std::int64_t num_tokens() const override { return num_samples_ * (seq_len_ + 1); }
  int seq_len() const override { return seq_len_; }
  int vocab() const override { return vocab_; }
  std::string describe() const override;
  void read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const override;

 private:
  int seq_len_;
  int vocab_;
  int alphabet_;
  std::uint64_t key_;
  std::int64_t num_samples_;
};

}  // namespace ptrain::data
