// POSIX file plumbing for checkpoints: read-only mappings of input files, and durable writes
// (write, fsync, rename, fsync the directory) so a crash leaves either the old or the new state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/io/replace_file.h"
#include "engine/runtime/mapped_file.h"

namespace ptrain::ckpt {

// Maps `path` read-only (runtime::MappedFile). A missing, unreadable or non-regular file is a
// CheckpointError (bad input). An empty file maps to an empty span.
runtime::MappedFile map_file(std::string path);

// Creates (truncates) a file and appends to it, keeping its size and CRC32C. finish() fsyncs and
// closes. A writer destroyed by an exception (a failed write: disk full) before finish() removes
// its partial file, so a failure frees what it took; one destroyed otherwise closes the file as it
// is. Failures throw CheckpointIoError.
class FileWriter {
 public:
  explicit FileWriter(std::string path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void finish();

  std::int64_t bytes() const { return bytes_; }
  std::uint32_t crc32c() const { return crc_; }

 private:
  std::string path_;
  int fd_ = -1;
  int exceptions_at_start_ = 0;  // std::uncaught_exceptions() when constructed
  bool finished_ = false;
  std::int64_t bytes_ = 0;
  std::uint32_t crc_ = 0;
};

// fsync on a directory, which makes the creation, removal or renaming of its entries durable.
void fsync_directory(const std::string& dir);

// Replaces `path` with `contents` atomically (io::replace_file: `path`.tmp-<random>, fsync, rename,
// fsync of the folder). On failure `path` is as it was and the temporary file is gone.
void write_file_atomically(const std::string& path, const std::string& contents);

// Makes `dir` ready to be written, before any work goes into what will be written there: creates it
// (and its parents) if needed and creates and removes a file in it. Otherwise a CheckpointError (bad
// input) naming `dir`: "<role> is not a directory", "cannot create <role>: ...", "<role> is not
// writable: ...", each followed by `fix`.
void prepare_output_directory(const std::string& dir, const std::string& role, const std::string& fix);

// Creates a directory (mode 0755); throws CheckpointIoError if it fails or exists.
void make_directory(const std::string& path);

// `dir`/`name`.
std::string join_path(const std::string& dir, const std::string& name);

using io::random_hex_suffix;  // for temporary names

}  // namespace ptrain::ckpt
