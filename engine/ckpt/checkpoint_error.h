// Errors of engine/ckpt. CheckpointError: a checkpoint, safetensors file or HF directory is missing
// or malformed (bad bytes, wrong shapes, checksum mismatch, a model that does not match the job).
// It names the file and, where one applies, the byte offset; the app reports it as bad input
// (exit 2). CheckpointIoError: writing failed (disk full, permissions): a runtime failure (exit 1).
// Nothing in engine/ckpt aborts or crashes on bad input.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "engine/io/file_format_error.h"

namespace ptrain::ckpt {

class CheckpointError : public io::FileFormatError {
 public:
  using io::FileFormatError::FileFormatError;  // (path, offset or kNoOffset, detail)
  CheckpointError(std::string path, const std::string& detail)
      : io::FileFormatError(std::move(path), kNoOffset, detail) {}
};

class CheckpointIoError : public std::runtime_error {
 public:
  // what() reads "<path>: <what failed>: <strerror(errnum)>"; errnum 0: the action says it all.
  CheckpointIoError(const std::string& path, const std::string& action, int errnum);
};

}  // namespace ptrain::ckpt
