// DataError: a data file (token shard, Megatron .idx/.bin, glob) is missing or malformed. It names
// the file, the byte offset where the problem sits, what was expected and what was found. The app
// reports it as bad input (exit 2); nothing in engine/data aborts or crashes on bad bytes.
#pragma once

#include <string>

#include "engine/io/file_format_error.h"
#include "engine/runtime/mapped_file.h"

namespace ptrain::data {

class DataError : public io::FileFormatError {
 public:
  using io::FileFormatError::FileFormatError;  // (path, offset or kNoOffset, detail)
};

// Maps `path` read-only (runtime::MappedFile); a file that cannot be mapped is a DataError naming it.
runtime::MappedFile map_data_file(std::string path);

}  // namespace ptrain::data
