#include "engine/runtime/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ptrain::runtime {

namespace {

// Closes a descriptor on every path out of the constructor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// `action` failed with errno `err`: "<action>: <strerror(err)>".
FileError errno_error(const std::string& path, const std::string& action, int err) {
  return FileError(path, action + ": " + std::strerror(err), err);
}

}  // namespace

FileError::FileError(std::string path, std::string detail, int error_number)
    : std::runtime_error(path + ": " + detail),
      path_(std::move(path)),
      detail_(std::move(detail)),
      error_number_(error_number) {}

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  FileDescriptor fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw errno_error(path_, "cannot open for reading", err);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    const int err = errno;
    throw errno_error(path_, "cannot stat", err);
  }
  if (!S_ISREG(info.st_mode)) {
    throw FileError(path_, "expected a regular file, found another kind of file", 0);
  }
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ == 0) return;
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    throw errno_error(path_, "cannot memory-map", err);
  }
  data_ = static_cast<const std::byte*>(mapped);
}

MappedFile::~MappedFile() {
  unmap();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) {
    // munmap takes a non-const pointer; the mapping itself is read-only.
    ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
}

}  // namespace ptrain::runtime
