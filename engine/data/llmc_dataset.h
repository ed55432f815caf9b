// LlmcDataset: llm.c token shards (the format of llm.c's dev/data scripts and scripts/prepare_data).
//
// One shard = a 1024-byte header of 256 little-endian int32 (header[0] = magic 20240520,
// header[1] = version 1, header[2] = token count n, the rest unused) followed by n uint16 tokens.
// Shards come from a glob, sorted by name (byte order). Sample i of a shard is its tokens
// [i*T, i*T + T + 1); samples never cross shards, so a shard contributes floor((n - 1) / T)
// samples, and samples are numbered across shards in shard order.
//
// The constructor checks every header and every file size (truncation and trailing bytes are
// errors); token ids are checked against the vocabulary when a sample is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/token_source.h"
#include "engine/runtime/mapped_file.h"

namespace ptrain::data {

class LlmcDataset final : public TokenSource {
 public:
  static constexpr std::int32_t kMagic = 20240520;
  static constexpr std::int32_t kVersion = 1;
  static constexpr std::int64_t kHeaderBytes = 1024;  // 256 int32
  static constexpr std::int64_t kTokenBytes = 2;      // uint16

  struct ShardInfo {
    std::string path;
    std::int64_t tokens = 0;
    std::int64_t samples = 0;       // floor((tokens - 1) / T), 0 if the shard is shorter than T + 1
    std::int64_t first_sample = 0;  // global index of its sample 0
  };

  // `pattern` is a glob ("data/train_*.bin") or a plain path. Throws DataError when nothing
  // matches (naming the pattern), for any malformed shard (naming file, offset, expected, found)
  // and when no shard holds T + 1 tokens. seq_len >= 1, vocab >= 1.
  LlmcDataset(const std::string& pattern, int seq_len, int vocab);

  const std::vector<ShardInfo>& shards() const { return infos_; }

  std::int64_t num_samples() const override { return num_samples_; }
  std::int64_t num_tokens() const override { return num_tokens_; }
  int seq_len() const override { return seq_len_; }
  int vocab() const override { return vocab_; }
  std::string describe() const override;
  void read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const override;

 private:
  std::string pattern_;
  int seq_len_;
  int vocab_;
  std::vector<runtime::MappedFile> files_;  // parallel to infos_
  std::vector<ShardInfo> infos_;
  std::int64_t num_samples_ = 0;
  std::int64_t num_tokens_ = 0;
};

// Paths matching a glob, sorted by name; a pattern without wildcards matches itself if it exists.
// Throws DataError naming the pattern when nothing matches.
std::vector<std::string> expand_glob(const std::string& pattern);

}  // namespace ptrain::data
