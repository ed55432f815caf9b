// FileFormatError: a file a user gave is missing or malformed. It names the file and, where one
// applies, the byte offset where the problem sits; the app reports it as bad input (exit 2). The
// readers' own errors derive from it (data::DataError, ckpt::CheckpointError), so that each area is
// caught by its own type while the message has one form.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ptrain::io {

class FileFormatError : public std::runtime_error {
 public:
  // No byte offset applies (a missing file, a glob that matches nothing, a shape that does not fit).
  static constexpr std::int64_t kNoOffset = -1;

  // what() reads "<path>: byte <offset>: <detail>" (or "<path>: <detail>" without an offset).
  FileFormatError(std::string path, std::int64_t offset, const std::string& detail);

  const std::string& path() const { return path_; }
  std::int64_t offset() const { return offset_; }

 private:
  std::string path_;
  std::int64_t offset_;
};

}  // namespace ptrain::io
