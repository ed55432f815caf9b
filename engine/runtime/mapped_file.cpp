#include "engine/runtime/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ptrain::runtime {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const io::InputFile file(path_);
  size_ = static_cast<std::size_t>(file.size());
  if (size_ == 0) return;
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    throw FileError(path_, std::string("cannot memory-map: ") + std::strerror(err), err);
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
