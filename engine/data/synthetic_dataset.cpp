#include "engine/data/synthetic_dataset.h"

#include <algorithm>
#include <stdexcept>

#include "engine/data/counter_hash.h"

namespace ptrain::data {

SyntheticDataset::SyntheticDataset(int seq_len, int vocab, std::uint64_t seed, std::uint64_t stream,
                                   std::int64_t num_samples)
    : seq_len_(seq_len),
      vocab_(vocab),
      alphabet_(std::min(vocab, kMaxAlphabet)),
      key_(seed ^ detail::mix64(stream + 0x5eed)),
      num_samples_(num_samples) {
  if (seq_len < 1 || vocab < 1 || num_samples < 1) {
    throw std::invalid_argument("SyntheticDataset: seq_len, vocab and num_samples must be >= 1");
  }
}

SyntheticDataset::Progression SyntheticDataset::progression(std::int64_t index) const {
  const auto i = static_cast<std::uint64_t>(index);
  const auto a = static_cast<std::uint64_t>(alphabet_);
  return {static_cast<std::int64_t>(detail::hash3(key_, i, 0) % a),
          static_cast<std::int64_t>(1 + detail::hash3(key_, i, 1) % kStrides)};
}

std::string SyntheticDataset::describe() const {
  return "synthetic: arithmetic progressions mod " + std::to_string(alphabet_) + ", strides 1.." +
         std::to_string(kStrides) + ", " + std::to_string(num_samples_) + " samples of " +
         std::to_string(seq_len_) + "+1 tokens";
}

void SyntheticDataset::read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const {
  if (index < 0 || index >= num_samples_) {
    throw std::out_of_range("SyntheticDataset::read_sample: index " + std::to_string(index) +
                            " outside [0, " + std::to_string(num_samples_) + ")");
  }
  const Progression p = progression(index);
  std::int64_t token = p.start;
  for (int j = 0; j < seq_len_; ++j) {
    inputs[j] = static_cast<std::int32_t>(token);
    token = (token + p.stride) % alphabet_;
  }
  std::copy(inputs + 1, inputs + seq_len_, targets);
  targets[seq_len_ - 1] = static_cast<std::int32_t>(token);
}

}  // namespace ptrain::data
