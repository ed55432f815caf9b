#include "engine/data/writers.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>

#include "engine/data/byte_io.h"
#include "engine/data/data_error.h"
#include "engine/data/llmc_dataset.h"

namespace ptrain::data {

namespace {

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file)
    throw DataError(path, DataError::kNoOffset,
                    std::string("cannot open for writing: ") + std::strerror(errno));
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
    throw DataError(path, DataError::kNoOffset, "short write");
  }
  if (std::fclose(file.release()) != 0)
    throw DataError(path, DataError::kNoOffset, "cannot close after writing");
}

template <typename T>
void append(std::vector<std::byte>& out, T value) {
  const std::size_t at = out.size();
  out.resize(at + sizeof(T));
  detail::store(out.data() + at, value);
}

template <typename T>
void append_token(std::vector<std::byte>& out, std::int64_t token) {
  if (token < std::numeric_limits<T>::min() || token > std::numeric_limits<T>::max()) {
    throw std::invalid_argument("write_megatron_dataset: token " + std::to_string(token) +
                                " does not fit the dtype");
  }
  append(out, static_cast<T>(token));
}

}  // namespace

void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("write_llmc_shard: too many tokens for one shard");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(LlmcDataset::kHeaderBytes));
  detail::store(bytes.data(), LlmcDataset::kMagic);
  detail::store(bytes.data() + 4, LlmcDataset::kVersion);
  detail::store(bytes.data() + 8, static_cast<std::int32_t>(tokens.size()));
  bytes.reserve(bytes.size() + tokens.size() * 2);
  for (std::uint16_t t : tokens) append(bytes, t);
  write_file(path, bytes);
}

void write_megatron_dataset(const std::string& prefix,
                            const std::vector<std::vector<std::int64_t>>& documents, MegatronDtype dtype) {
  std::vector<std::byte> bin;
  for (const auto& doc : documents) {
    for (std::int64_t t : doc) {
      switch (dtype) {
        case MegatronDtype::UInt8:
          append_token<std::uint8_t>(bin, t);
          break;
        case MegatronDtype::Int8:
          append_token<std::int8_t>(bin, t);
          break;
        case MegatronDtype::Int16:
          append_token<std::int16_t>(bin, t);
          break;
        case MegatronDtype::UInt16:
          append_token<std::uint16_t>(bin, t);
          break;
        case MegatronDtype::Int32:
          append_token<std::int32_t>(bin, t);
          break;
        case MegatronDtype::Int64:
          append_token<std::int64_t>(bin, t);
          break;
        case MegatronDtype::Float32:
        case MegatronDtype::Float64:
          throw std::invalid_argument("write_megatron_dataset: float dtypes are not token types");
      }
    }
  }
  const auto count = static_cast<std::uint64_t>(documents.size());
  std::vector<std::byte> idx;
  for (char c : MegatronDataset::kIdxMagic) append(idx, c);
  append(idx, MegatronDataset::kVersion);
  append(idx, static_cast<std::uint8_t>(dtype));
  append(idx, count);      // sequences: one per document
  append(idx, count + 1);  // document indices: 0, 1, ..., count
  for (const auto& doc : documents) append(idx, static_cast<std::int32_t>(doc.size()));
  std::int64_t pointer = 0;
  for (const auto& doc : documents) {
    append(idx, pointer);
    pointer += static_cast<std::int64_t>(doc.size()) * itemsize(dtype);
  }
  for (std::uint64_t d = 0; d <= count; ++d) append(idx, static_cast<std::int64_t>(d));
  write_file(prefix + ".bin", bin);
  write_file(prefix + ".idx", idx);
}

}  // namespace ptrain::data
