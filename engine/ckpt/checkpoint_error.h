// Errors of engine/ckpt. CheckpointError: a checkpoint, safetensors file or HF directory is missing
// or malformed (bad bytes, wrong shapes, checksum mismatch, a model that does not match the job).
// It names the file and, where one applies, the byte offset; the app reports it as bad input
// (exit 2). CheckpointIoError: writing failed (disk full, permissions): a runtime failure (exit 1).
// Nothing in engine/ckpt aborts or crashes on bad input.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ptrain::ckpt {

class CheckpointError : public std::runtime_error {
 public:
  static constexpr std::int64_t kNoOffset = -1;

  // what() reads "<path>: byte <offset>: <detail>" (or "<path>: <detail>" without an offset).
  CheckpointError(std::string path, std::int64_t offset, const std::string& detail);
  CheckpointError(std::string path, const std::string& detail)
      : CheckpointError(std::move(path), kNoOffset, detail) {}

  const std::string& path() const { return path_; }
  std::int64_t offset() const { return offset_; }

 private:
  std::string path_;
  std::int64_t offset_;
};

class CheckpointIoError : public std::runtime_error {
 public:
  // what() reads "<path>: <what failed>: <strerror(errnum)>".
  CheckpointIoError(const std::string& path, const std::string& action, int errnum);
};

}  // namespace ptrain::ckpt
