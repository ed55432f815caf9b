// MegatronDataset: a Megatron-LM indexed dataset (`<prefix>.idx` + `<prefix>.bin`, the
// MMIDIDX format written by Megatron's tools/preprocess_data.py).
//
// .idx, little-endian:
//   offset  0  char[9]  magic "MMIDIDX\0\0"
//           9  uint64   version (1)
//          17  uint8    dtype code (see MegatronDtype)
//          18  uint64   sequence count S
//          26  uint64   document count D
//          34  int32    sizes[S]            tokens per sequence
//     34+4S    int64    pointers[S]         byte offset of each sequence in .bin
//     34+12S   int64    doc_idx[D]          first sequence of each document; 0 first, S last
//   (optionally followed by int8 modes[S], the multimodal variant; ignored)
// .bin: the sequences' tokens, raw, in dtype.
//
// The documents, in document order, are read as one token stream (sequence order, since doc_idx
// is monotonic), and samples are cut from it as in llm.c: sample i = stream tokens
// [i*T, i*T + T + 1), floor((N - 1) / T) samples for N tokens; samples may span documents.
// Everything in .idx is validated at open; token ids are checked when a sample is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/token_source.h"
#include "engine/runtime/mapped_file.h"

namespace ptrain::data {

enum class MegatronDtype : std::uint8_t {
  UInt8 = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float64 = 6,  // rejected: token ids are integers
  Float32 = 7,  // rejected
  UInt16 = 8,
};
const char* to_string(MegatronDtype);
int itemsize(MegatronDtype);  // bytes per token

class MegatronDataset final : public TokenSource {
 public:
  static constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  static constexpr std::uint64_t kVersion = 1;
  static constexpr std::int64_t kIdxHeaderBytes = 34;

  // Opens prefix + ".idx" and prefix + ".bin". Throws DataError (file, byte offset, expected,
  // found) for anything malformed or inconsistent, and when the stream is shorter than T + 1.
  MegatronDataset(const std::string& prefix, int seq_len, int vocab);

  MegatronDtype dtype() const { return dtype_; }
  std::int64_t num_sequences() const { return static_cast<std::int64_t>(seq_offset_.size()); }
  std::int64_t num_documents() const { return num_documents_; }

  std::int64_t num_samples() const override { return num_samples_; }
  std::int64_t num_tokens() const override { return seq_start_.back(); }
  int seq_len() const override { return seq_len_; }
  int vocab() const override { return vocab_; }
  std::string describe() const override;
  void read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const override;

 private:
  // Converts `count` tokens of sequence `seq`, starting at its token `first`, into out[0..count),
  // checking each against [0, vocab).
  void convert(std::size_t seq, std::int64_t first, std::int64_t count, std::int32_t* out) const;

  std::string prefix_;
  int seq_len_;
  int vocab_;
  runtime::MappedFile bin_;
  MegatronDtype dtype_ = MegatronDtype::UInt16;
  int itemsize_ = 2;
  std::int64_t num_documents_ = 0;
  std::vector<std::int64_t> seq_offset_;  // byte offset of sequence i in .bin
  std::vector<std::int64_t> seq_start_;   // S + 1 entries: stream position of sequence i's token 0
  std::int64_t num_samples_ = 0;
};

}  // namespace ptrain::data
