#include "engine/ckpt/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <utility>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/crc32c.h"
#include "engine/io/replace_file.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;

runtime::MappedFile map_file(std::string path) {
  try {
    return runtime::MappedFile(std::move(path));
  } catch (const runtime::FileError& e) {
    throw CheckpointError(e.path(), e.detail());
  }
}

FileWriter::FileWriter(std::string path) : path_(std::move(path)), exceptions_at_start_(std::uncaught_exceptions()) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointIoError(path_, "cannot create", errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && std::uncaught_exceptions() > exceptions_at_start_) ::unlink(path_.c_str());
}

void FileWriter::write(const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  crc_ = crc32c_extend(crc_, p, size);
  bytes_ += static_cast<std::int64_t>(size);
  while (size > 0) {
    const std::size_t chunk = std::min<std::size_t>(size, std::size_t{1} << 30);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CheckpointIoError(path_, "write failed", errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void FileWriter::finish() {
  if (::fsync(fd_) != 0) throw CheckpointIoError(path_, "fsync failed", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw CheckpointIoError(path_, "close failed", errno);
  finished_ = true;
}

void fsync_directory(const std::string& dir) {
  if (const std::optional<io::WriteFailure> failure = io::sync_directory(dir))
    throw CheckpointIoError(dir, failure->action, failure->error);
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  if (const std::optional<io::WriteFailure> failure = io::replace_file(path, contents))
    throw CheckpointIoError(path, failure->action, failure->error);
}

void prepare_output_directory(const std::string& dir, const std::string& role, const std::string& fix) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw CheckpointError(dir, role + " is not a directory" + fix);
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(dir, "cannot create " + role + ": " + ec.message() + fix);
  // latest.tmp-*: the name of a crashed save's leftover, which the next claim of a checkpoint
  // directory removes should this process die right here.
  const std::string probe = join_path(dir, "latest.tmp-" + random_hex_suffix());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw CheckpointError(dir,
                          role + " is not writable: cannot create a file in it: " + std::strerror(errno) + fix);
  ::close(fd);
  ::unlink(probe.c_str());
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) throw CheckpointIoError(path, "cannot create directory", errno);
}

std::string join_path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

}  // namespace ptrain::ckpt
