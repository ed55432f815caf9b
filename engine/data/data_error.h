// DataError: a data file (token shard, Megatron .idx/.bin, glob) is missing or malformed. It names
// the file, the byte offset where the problem sits, what was expected and what was found. The app
// reports it as bad input (exit 2); nothing in engine/data aborts or crashes on bad bytes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/runtime/mapped_file.h"

namespace ptrain::data {

class DataError : public std::runtime_error {
 public:
  // No byte offset applies (a missing file, a glob that matches nothing, an I/O error).
  static constexpr std::int64_t kNoOffset = -1;

  // what() reads "<path>: byte <offset>: <detail>" (or "<path>: <detail>" without an offset).
  DataError(std::string path, std::int64_t offset, const std::string& detail);

  const std::string& path() const { return path_; }
  std::int64_t offset() const { return offset_; }

 private:
  std::string path_;
  std::int64_t offset_;
};

// Maps `path` read-only (runtime::MappedFile); a file that cannot be mapped is a DataError naming it.
runtime::MappedFile map_data_file(std::string path);

}  // namespace ptrain::data
