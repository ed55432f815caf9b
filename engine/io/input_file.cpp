#include "engine/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "engine/io/file_kind.h"

namespace ptrain::io {
namespace {

FileError errno_error(const std::string& path, const std::string& action, int err) {
  return FileError(path, action + ": " + std::strerror(err) + (err == ENOENT ? relative_path_note(path) : ""),
                   err);
}

}  // namespace

FileError::FileError(std::string path, std::string detail, int error_number)
    : std::runtime_error(path + ": " + detail),
      path_(std::move(path)),
      detail_(std::move(detail)),
      error_number_(error_number) {}

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw errno_error(path_, "cannot open for reading", errno);
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw errno_error(path_, "cannot stat", errno);
    if (!S_ISREG(info.st_mode))
      throw FileError(path_, std::string("expected a regular file, found ") + file_kind(info.st_mode), 0);
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0)
      throw errno_error(path_, "cannot open for reading", errno);
    size_ = static_cast<std::int64_t>(info.st_size);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

InputFile::~InputFile() {
  ::close(fd_);
}

std::string InputFile::read_all() const {
  std::string text;
  text.reserve(static_cast<std::size_t>(size_));
  char buffer[1 << 16];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd_, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errno_error(path_, "reading failed", errno);
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
}

std::string read_input_file(const std::string& path) {
  return InputFile(path).read_all();
}

std::string relative_path_note(const std::string& path) {
  const std::filesystem::path p(path);
  if (path.empty() || p.is_absolute()) return "";
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec) return " (relative to the working directory, which cannot be read: " + ec.message() + ")";
  return " (relative to the working directory " + cwd.string() + ": " +
         (cwd / p).lexically_normal().string() + ")";
}

}  // namespace ptrain::io
