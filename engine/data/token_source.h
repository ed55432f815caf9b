// TokenSource: a dataset seen as a numbered list of samples. A sample is seq_len + 1 consecutive
// tokens; the model reads the first seq_len as inputs and the last seq_len as targets.
//
// Implementations (one file per format): LlmcDataset (llm.c .bin shards), MegatronDataset
// (Megatron-LM .idx/.bin), SyntheticDataset (a learnable generated family). All are immutable
// after construction and safe to read from several threads at once.
#pragma once

#include <cstdint>
#include <string>

namespace ptrain::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;

  // Samples available, >= 1. Sample indices are [0, num_samples()).
  virtual std::int64_t num_samples() const = 0;
  // Tokens in the underlying files (for logs); synthetic sources report num_samples * (T + 1).
  virtual std::int64_t num_tokens() const = 0;
  // T: a sample is T + 1 tokens.
  virtual int seq_len() const = 0;
  // Every token a sample yields is in [0, vocab()).
  virtual int vocab() const = 0;
  // One line for logs, e.g. "llmc: 3 shards (data/train_*.bin), 1048576 tokens, 8191 samples".
  virtual std::string describe() const = 0;

  // Writes the sample's tokens [0, T) to inputs[0..T) and [1, T+1) to targets[0..T).
  // Throws DataError for a token outside [0, vocab) (naming the file and byte offset) and
  // std::out_of_range for an index outside [0, num_samples()). No allocation.
  virtual void read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const = 0;

 protected:
  TokenSource() = default;
  TokenSource(const TokenSource&) = default;
  TokenSource& operator=(const TokenSource&) = default;
};

}  // namespace ptrain::data
