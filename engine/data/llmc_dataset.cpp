#include "engine/data/llmc_dataset.h"

#include <glob.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "engine/data/byte_io.h"
#include "engine/data/data_error.h"
#include "engine/io/input_file.h"

namespace ptrain::data {

using detail::load;

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) {
    paths.reserve(matches.gl_pathc);
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (rc == GLOB_NOSPACE) throw DataError(pattern, DataError::kNoOffset, "out of memory expanding the glob");
  if (paths.empty()) {
    throw DataError(
        pattern, DataError::kNoOffset,
        "expected at least one file matching this pattern, found none" + io::relative_path_note(pattern));
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

namespace {

// Checks one shard's header and size; returns its token count.
std::int64_t validate_shard(const runtime::MappedFile& file) {
  const std::int64_t size = file.size();
  const std::byte* bytes = file.data();
  if (size < LlmcDataset::kHeaderBytes) {
    throw DataError(file.path(), size,
                    "truncated llm.c shard: expected at least " + std::to_string(LlmcDataset::kHeaderBytes) +
                        " bytes (the header), found " + std::to_string(size) + " bytes");
  }
  const auto magic = load<std::int32_t>(bytes);
  if (magic != LlmcDataset::kMagic) {
    throw DataError(file.path(), 0,
                    "not an llm.c token shard: expected magic " + std::to_string(LlmcDataset::kMagic) +
                        ", found " + std::to_string(magic));
  }
  const auto version = load<std::int32_t>(bytes + 4);
  if (version != LlmcDataset::kVersion) {
    throw DataError(file.path(), 4,
                    "unsupported llm.c shard version: expected " + std::to_string(LlmcDataset::kVersion) +
                        " (uint16 tokens), found " + std::to_string(version));
  }
  const std::int64_t count = load<std::int32_t>(bytes + 8);
  if (count < 0) {
    throw DataError(file.path(), 8,
                    "bad token count in the header: expected >= 0, found " + std::to_string(count));
  }
  const std::int64_t expected = LlmcDataset::kHeaderBytes + count * LlmcDataset::kTokenBytes;
  if (expected != size) {
    const std::string what = size < expected ? "truncated llm.c shard" : "trailing bytes after the tokens";
    throw DataError(file.path(), std::min(size, expected),
                    what + ": the header says " + std::to_string(count) + " tokens, so expected " +
                        std::to_string(expected) + " bytes, found " + std::to_string(size) + " bytes");
  }
  return count;
}

}  // namespace

LlmcDataset::LlmcDataset(const std::string& pattern, int seq_len, int vocab)
    : pattern_(pattern), seq_len_(seq_len), vocab_(vocab) {
  if (seq_len < 1 || vocab < 1) throw std::invalid_argument("LlmcDataset: seq_len and vocab must be >= 1");
  std::int64_t longest = 0;
  for (std::string& path : expand_glob(pattern)) {
    runtime::MappedFile file = map_data_file(std::move(path));
    const std::int64_t tokens = validate_shard(file);
    ShardInfo info;
    info.path = file.path();
    info.tokens = tokens;
    info.samples = tokens > 0 ? (tokens - 1) / seq_len : 0;
    info.first_sample = num_samples_;
    num_samples_ += info.samples;
    num_tokens_ += tokens;
    longest = std::max(longest, tokens);
    files_.push_back(std::move(file));
    infos_.push_back(std::move(info));
  }
  if (num_samples_ == 0) {
    throw DataError(pattern, DataError::kNoOffset,
                    "too few tokens: a sample needs model.seq_len + 1 = " + std::to_string(seq_len + 1) +
                        " tokens within one shard, the longest of the " + std::to_string(infos_.size()) +
                        " shard(s) has " + std::to_string(longest));
  }
}

std::string LlmcDataset::describe() const {
  return "llmc: " + std::to_string(infos_.size()) + " shard(s) (" + pattern_ + "), " +
         std::to_string(num_tokens_) + " tokens, " + std::to_string(num_samples_) + " samples of " +
         std::to_string(seq_len_) + "+1 tokens";
}

void LlmcDataset::read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const {
  if (index < 0 || index >= num_samples_) {
    throw std::out_of_range("LlmcDataset::read_sample: index " + std::to_string(index) + " outside [0, " +
                            std::to_string(num_samples_) + ")");
  }
  // The last shard whose first sample is <= index (empty shards share first_sample with the next).
  const auto it = std::upper_bound(infos_.begin(), infos_.end(), index,
                                   [](std::int64_t i, const ShardInfo& s) { return i < s.first_sample; });
  const auto shard = static_cast<std::size_t>(std::distance(infos_.begin(), it) - 1);
  const std::int64_t first_token = (index - infos_[shard].first_sample) * seq_len_;
  const std::int64_t first_byte = kHeaderBytes + first_token * kTokenBytes;
  const std::byte* at = files_[shard].data() + first_byte;

  auto token = [&](int j) -> std::int32_t {
    const std::uint16_t value = load<std::uint16_t>(at + j * kTokenBytes);
    if (value >= vocab_) {
      throw DataError(infos_[shard].path, first_byte + j * kTokenBytes,
                      "token id out of range: expected < " + std::to_string(vocab_) +
                          " (model.vocab), found " + std::to_string(value));
    }
    return value;
  };
  for (int j = 0; j < seq_len_; ++j) inputs[j] = token(j);
  std::copy(inputs + 1, inputs + seq_len_, targets);
  targets[seq_len_ - 1] = token(seq_len_);
}

}  // namespace ptrain::data
