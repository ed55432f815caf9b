#include "engine/train/record_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace ptrain::train {

RecordFile::RecordFile(std::string key, std::string path) : key_(std::move(key)), path_(std::move(path)) {
  std::error_code ignored;  // a folder that cannot be made shows up as the open failing
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0)
    throw std::invalid_argument(key_ + ": cannot open '" + path_ + "' for writing: " + std::strerror(errno));
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordFile::append(std::string_view record, const std::string& what) {
  const off_t start = ::lseek(fd_, 0, SEEK_END);  // where the record begins (appending writes there)
  std::size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + written, record.size() - written);
    if (n > 0) {
      written += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : EIO;
    std::string left = "; the file holds the records before it, whole";
    if (written > 0 && ::ftruncate(fd_, start) != 0)
      left = "; the file ends in the first " + std::to_string(written) +
             " bytes of it, which no reader takes (cutting them off failed: " + std::strerror(errno) + ")";
    throw RecordWriteError(key_ + ": cannot write '" + path_ + "': " + std::strerror(err) + ": " + what +
                           " was not written" + left);
  }
}

void RecordFile::close() {
  const int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0)
    throw RecordWriteError(key_ + ": cannot write '" + path_ + "': " + std::strerror(errno) +
                           " (reported on closing it): records written before may be missing");
}

}  // namespace ptrain::train
