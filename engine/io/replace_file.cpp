#include "engine/io/replace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/io/file_kind.h"

namespace ptrain::io {
namespace {

namespace fs = std::filesystem;

// The file `path` names: through a symlink, its target (a dangling link is itself replaced).
std::string resolved(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  const fs::path target = fs::canonical(path, ec);
  return ec ? path : target.string();
}

std::optional<WriteFailure> write_all(int fd, std::string_view contents) {
  while (!contents.empty()) {
    const ssize_t n = ::write(fd, contents.data(), std::min<std::size_t>(contents.size(), std::size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return WriteFailure{"write failed", errno};
    }
    contents.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd) != 0) return WriteFailure{"fsync failed", errno};
  return std::nullopt;
}

}  // namespace

std::optional<WriteFailure> sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return WriteFailure{"cannot open directory", errno};
  const int synced = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (synced != 0) return WriteFailure{"fsync of directory failed", err};
  return std::nullopt;
}

std::string WriteFailure::describe() const { return error == 0 ? action : action + ": " + std::strerror(error); }

std::optional<WriteFailure> replace_file(const std::string& path, std::string_view contents) {
  const std::string target = resolved(path);
  struct stat old {};
  const bool existed = ::stat(target.c_str(), &old) == 0;
  if (existed && !S_ISREG(old.st_mode)) return WriteFailure{std::string("it is ") + file_kind(old.st_mode) + ", not a regular file"};
  const std::string tmp = target + ".tmp-" + random_hex_suffix();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return WriteFailure{"cannot create " + tmp, errno};
  std::optional<WriteFailure> failure;
  if (existed && ::fchmod(fd, old.st_mode & 07777) != 0) failure = WriteFailure{"cannot keep its permissions", errno};
  if (!failure) failure = write_all(fd, contents);
  if (::close(fd) != 0 && !failure) failure = WriteFailure{"close failed", errno};
  if (!failure && ::rename(tmp.c_str(), target.c_str()) != 0) failure = WriteFailure{"cannot rename " + tmp + " to it", errno};
  if (failure) {
    ::unlink(tmp.c_str());
    return failure;
  }
  const std::string folder = fs::path(target).parent_path().string();
  return sync_directory(folder.empty() ? "." : folder);
}

std::string random_hex_suffix() {
  std::random_device device;
  const std::uint64_t r = (std::uint64_t{device()} << 32) ^ device();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 0; i < 16; ++i) out[static_cast<std::size_t>(i)] = kHex[(r >> (4 * i)) & 0xFu];
  return out;
}

}  // namespace ptrain::io
