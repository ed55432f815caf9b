#include "engine/data/megatron_dataset.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/data/byte_io.h"
#include "engine/data/data_error.h"

namespace ptrain::data {

using detail::load;

const char* to_string(MegatronDtype dtype) {
  switch (dtype) {
    case MegatronDtype::UInt8:
      return "uint8";
    case MegatronDtype::Int8:
      return "int8";
    case MegatronDtype::Int16:
      return "int16";
    case MegatronDtype::Int32:
      return "int32";
    case MegatronDtype::Int64:
      return "int64";
    case MegatronDtype::Float64:
      return "float64";
    case MegatronDtype::Float32:
      return "float32";
    case MegatronDtype::UInt16:
      return "uint16";
  }
  return "unknown";
}

int itemsize(MegatronDtype dtype) {
  switch (dtype) {
    case MegatronDtype::UInt8:
    case MegatronDtype::Int8:
      return 1;
    case MegatronDtype::Int16:
    case MegatronDtype::UInt16:
      return 2;
    case MegatronDtype::Int32:
    case MegatronDtype::Float32:
      return 4;
    case MegatronDtype::Int64:
    case MegatronDtype::Float64:
      return 8;
  }
  return 0;
}

namespace {

constexpr std::int64_t kVersionOffset = 9;
constexpr std::int64_t kDtypeOffset = 17;
constexpr std::int64_t kSeqCountOffset = 18;
constexpr std::int64_t kDocCountOffset = 26;

std::string str(std::int64_t v) {
  return std::to_string(v);
}

template <typename T>
void convert_tokens(const std::byte* src, std::int64_t count, std::int32_t* out, int vocab,
                    const std::string& path, std::int64_t src_offset) {
  for (std::int64_t j = 0; j < count; ++j) {
    const T value = load<T>(src + j * static_cast<std::int64_t>(sizeof(T)));
    // Compare in int64 so that every integer dtype, signed or not, is range-checked exactly.
    const auto wide = static_cast<std::int64_t>(value);
    if (wide < 0 || wide >= vocab) {
      throw DataError(
          path, src_offset + j * static_cast<std::int64_t>(sizeof(T)),
          "token id out of range: expected 0 <= id < " + str(vocab) + " (model.vocab), found " + str(wide));
    }
    out[j] = static_cast<std::int32_t>(wide);
  }
}

}  // namespace

MegatronDataset::MegatronDataset(const std::string& prefix, int seq_len, int vocab)
    : prefix_(prefix), seq_len_(seq_len), vocab_(vocab), bin_(map_data_file(prefix + ".bin")) {
  if (seq_len < 1 || vocab < 1)
    throw std::invalid_argument("MegatronDataset: seq_len and vocab must be >= 1");
  const runtime::MappedFile idx = map_data_file(prefix + ".idx");
  const std::string& ipath = idx.path();
  const std::int64_t isize = idx.size();
  const std::byte* ib = idx.data();

  // Header. The magic is checked first so that a file of another kind is named as such.
  if (isize >= static_cast<std::int64_t>(sizeof(kIdxMagic)) &&
      std::memcmp(ib, kIdxMagic, sizeof(kIdxMagic)) != 0) {
    std::string found;
    for (std::size_t i = 0; i < sizeof(kIdxMagic); ++i) {
      const auto c = static_cast<unsigned char>(ib[i]);
      if (c >= 0x20 && c < 0x7f) {
        found += static_cast<char>(c);
      } else {
        static const char* hex = "0123456789abcdef";
        found += "\\x";
        found += hex[c >> 4];
        found += hex[c & 15];
      }
    }
    throw DataError(ipath, 0,
                    "not a Megatron index: expected magic \"MMIDIDX\\x00\\x00\", found \"" + found + "\"");
  }
  if (isize < kIdxHeaderBytes) {
    throw DataError(ipath, isize,
                    "truncated Megatron index: expected at least " + str(kIdxHeaderBytes) +
                        " bytes (the header), found " + str(isize) + " bytes");
  }
  const auto version = load<std::uint64_t>(ib + kVersionOffset);
  if (version != kVersion) {
    throw DataError(ipath, kVersionOffset,
                    "unsupported Megatron index version: expected " + std::to_string(kVersion) + ", found " +
                        std::to_string(version));
  }
  const auto code = load<std::uint8_t>(ib + kDtypeOffset);
  if (code < 1 || code > 8) {
    throw DataError(ipath, kDtypeOffset,
                    "unknown dtype code: expected 1..8 (uint8, int8, int16, int32, int64, float64, float32, "
                    "uint16), found " +
                        str(code));
  }
  dtype_ = static_cast<MegatronDtype>(code);
  if (dtype_ == MegatronDtype::Float32 || dtype_ == MegatronDtype::Float64) {
    throw DataError(ipath, kDtypeOffset,
                    std::string("unsupported dtype: expected an integer token type (uint8, int8, int16, "
                                "int32, int64, uint16), found ") +
                        to_string(dtype_) + " (code " + str(code) + ")");
  }
  itemsize_ = itemsize(dtype_);

  const auto seq_count_u = load<std::uint64_t>(ib + kSeqCountOffset);
  const auto doc_count_u = load<std::uint64_t>(ib + kDocCountOffset);
  // Bound the counts by the file size before any arithmetic on them can overflow.
  const auto body = static_cast<std::uint64_t>(isize - kIdxHeaderBytes);
  if (seq_count_u > body / 12 || doc_count_u > body / 8 || seq_count_u * 12 + doc_count_u * 8 > body) {
    throw DataError(
        ipath, isize,
        "truncated Megatron index: the header says " + std::to_string(seq_count_u) + " sequences and " +
            std::to_string(doc_count_u) + " documents, which need " +
            (seq_count_u > body || doc_count_u > body
                 ? std::string("more bytes than the file has")
                 : std::to_string(kIdxHeaderBytes + 12 * seq_count_u + 8 * doc_count_u) + " bytes") +
            ", found " + str(isize) + " bytes");
  }
  const auto seq_count = static_cast<std::int64_t>(seq_count_u);
  const auto doc_count = static_cast<std::int64_t>(doc_count_u);
  const std::int64_t sizes_at = kIdxHeaderBytes;
  const std::int64_t pointers_at = sizes_at + 4 * seq_count;
  const std::int64_t docs_at = pointers_at + 8 * seq_count;
  const std::int64_t expected = docs_at + 8 * doc_count;
  // Megatron's multimodal variant appends one int8 mode per sequence; accept it, ignore it.
  if (isize != expected && isize != expected + seq_count) {
    throw DataError(ipath, expected,
                    "trailing bytes in Megatron index: " + str(seq_count) + " sequences and " +
                        str(doc_count) + " documents need " + str(expected) + " bytes (or " +
                        str(expected + seq_count) + " with per-sequence modes), found " + str(isize) +
                        " bytes");
  }

  // Sequences: sizes, pointers within .bin, in order and not overlapping.
  const std::string& bpath = bin_.path();
  const std::int64_t bsize = bin_.size();
  seq_offset_.resize(static_cast<std::size_t>(seq_count));
  seq_start_.resize(static_cast<std::size_t>(seq_count) + 1);
  seq_start_[0] = 0;
  std::int64_t previous_end = 0;
  for (std::int64_t i = 0; i < seq_count; ++i) {
    const std::int64_t size_at = sizes_at + 4 * i;
    const std::int64_t pointer_at = pointers_at + 8 * i;
    const std::int64_t size = load<std::int32_t>(ib + size_at);
    const std::int64_t pointer = load<std::int64_t>(ib + pointer_at);
    if (size < 0) {
      throw DataError(ipath, size_at,
                      "bad size of sequence " + str(i) + ": expected >= 0 tokens, found " + str(size));
    }
    if (pointer < previous_end) {
      throw DataError(ipath, pointer_at,
                      "bad pointer of sequence " + str(i) +
                          ": expected a .bin byte offset >= " + str(previous_end) +
                          " (pointers ascend, sequences do not overlap), found " + str(pointer));
    }
    const std::int64_t bytes = size * itemsize_;  // < 2^31 * 8: no overflow
    if (pointer > bsize || bytes > bsize - pointer) {
      throw DataError(ipath, pointer_at,
                      "pointer of sequence " + str(i) + " out of bounds: " + str(size) + " " +
                          to_string(dtype_) + " tokens at byte " + str(pointer) + " need " + bpath +
                          " to hold at least " + (pointer > bsize ? str(pointer) : str(pointer + bytes)) +
                          " bytes, found " + str(bsize) + " bytes");
    }
    previous_end = pointer + bytes;
    seq_offset_[static_cast<std::size_t>(i)] = pointer;
    seq_start_[static_cast<std::size_t>(i) + 1] = seq_start_[static_cast<std::size_t>(i)] + size;
  }
  if (previous_end != bsize) {
    throw DataError(bpath, previous_end,
                    "trailing bytes in Megatron data: " + ipath + " places its last token before byte " +
                        str(previous_end) + ", found " + str(bsize) + " bytes (mismatched .idx and .bin?)");
  }

  // Documents: first sequence of each, 0 first, ascending, the sequence count last.
  if (doc_count < 1) {
    throw DataError(ipath, kDocCountOffset,
                    "bad document count: expected >= 1 (document indices start with 0), found 0");
  }
  std::int64_t previous_doc = 0;
  for (std::int64_t d = 0; d < doc_count; ++d) {
    const std::int64_t at = docs_at + 8 * d;
    const auto first = load<std::int64_t>(ib + at);
    if ((d == 0 && first != 0) || first < previous_doc || first > seq_count ||
        (d == doc_count - 1 && first != seq_count)) {
      const std::string want = d == 0 ? std::string("0")
                               : d == doc_count - 1
                                   ? "the sequence count " + str(seq_count)
                                   : "a value in [" + str(previous_doc) + ", " + str(seq_count) + "]";
      throw DataError(ipath, at,
                      "bad document index " + str(d) + ": expected " + want + ", found " + str(first));
    }
    previous_doc = first;
  }
  num_documents_ = doc_count - 1;

  const std::int64_t tokens = seq_start_.back();
  num_samples_ = tokens > 0 ? (tokens - 1) / seq_len : 0;
  if (num_samples_ == 0) {
    throw DataError(bpath, DataError::kNoOffset,
                    "too few tokens: a sample needs model.seq_len + 1 = " + str(seq_len + 1) +
                        " tokens, the dataset has " + str(tokens));
  }
}

std::string MegatronDataset::describe() const {
  return "megatron: " + prefix_ + " (" + to_string(dtype_) + ", " + std::to_string(num_documents_) +
         " documents, " + std::to_string(num_sequences()) + " sequences), " + std::to_string(num_tokens()) +
         " tokens, " + std::to_string(num_samples_) + " samples of " + std::to_string(seq_len_) + "+1 tokens";
}

void MegatronDataset::convert(std::size_t seq, std::int64_t first, std::int64_t count,
                              std::int32_t* out) const {
  const std::int64_t offset = seq_offset_[seq] + first * itemsize_;
  const std::byte* src = bin_.data() + offset;
  const std::string& path = bin_.path();
  switch (dtype_) {
    case MegatronDtype::UInt8:
      return convert_tokens<std::uint8_t>(src, count, out, vocab_, path, offset);
    case MegatronDtype::Int8:
      return convert_tokens<std::int8_t>(src, count, out, vocab_, path, offset);
    case MegatronDtype::Int16:
      return convert_tokens<std::int16_t>(src, count, out, vocab_, path, offset);
    case MegatronDtype::UInt16:
      return convert_tokens<std::uint16_t>(src, count, out, vocab_, path, offset);
    case MegatronDtype::Int32:
      return convert_tokens<std::int32_t>(src, count, out, vocab_, path, offset);
    case MegatronDtype::Int64:
      return convert_tokens<std::int64_t>(src, count, out, vocab_, path, offset);
    case MegatronDtype::Float32:
    case MegatronDtype::Float64:
      break;  // rejected at open
  }
}

void MegatronDataset::read_sample(std::int64_t index, std::int32_t* inputs, std::int32_t* targets) const {
  if (index < 0 || index >= num_samples_) {
    throw std::out_of_range("MegatronDataset::read_sample: index " + std::to_string(index) + " outside [0, " +
                            std::to_string(num_samples_) + ")");
  }
  const std::int64_t T = seq_len_;
  std::int64_t pos = index * T;  // stream position of the sample's token 0
  // The last sequence starting at or before pos: it is non-empty and holds pos.
  auto seq = static_cast<std::size_t>(std::upper_bound(seq_start_.begin(), seq_start_.end(), pos) -
                                      seq_start_.begin() - 1);
  std::int32_t last = 0;
  for (std::int64_t j = 0; j <= T;) {
    const std::int64_t in_seq = pos - seq_start_[seq];
    const std::int64_t avail = seq_start_[seq + 1] - pos;
    const std::int64_t n = std::min(avail, T + 1 - j);
    const std::int64_t to_inputs = std::min(n, T - j);
    if (to_inputs > 0) convert(seq, in_seq, to_inputs, inputs + j);
    if (to_inputs < n) convert(seq, in_seq + to_inputs, 1, &last);
    j += n;
    pos += n;
    ++seq;  // empty sequences give n == 0 and are stepped over
  }
  std::copy(inputs + 1, inputs + T, targets);
  targets[T - 1] = last;
}

}  // namespace ptrain::data
