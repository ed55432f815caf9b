// MappedFile: a whole file mapped read-only (mmap), unmapped on destruction. Move-only. Shared by
// engine/data (token shards) and engine/ckpt (checkpoints, safetensors), which translate FileError
// into their own error types.
//
// The mapping stays valid after the descriptor is closed. A file that another process truncates
// while it is mapped can still raise SIGBUS on access; mapped inputs are expected to be immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/io/input_file.h"

namespace ptrain::runtime {

// A file could not be opened (io::InputFile: not a regular file, no such file) or mapped.
using FileError = io::FileError;

class MappedFile {
 public:
  // Maps `path`; throws FileError if it cannot be opened, is not a regular file (io::InputFile:
  // a named pipe is refused without waiting on it), or mmap fails.
  // An empty file yields an empty span (nothing is mapped).
  explicit MappedFile(std::string path);
  ~MappedFile();

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t size() const { return static_cast<std::int64_t>(size_); }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }

 private:
  void unmap() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ptrain::runtime
