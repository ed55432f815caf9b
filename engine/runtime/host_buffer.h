// Owning, 64-byte aligned host memory for the CPU backend's flat buffers and arenas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/buffer.h"

namespace ptrain::runtime {

class HostBuffer {
 public:
  HostBuffer() = default;
  // Zero-filled storage for `count` elements of `dtype`.
  HostBuffer(std::int64_t count, kernels::DType dtype);

  std::int64_t size() const { return count_; }
  std::size_t bytes() const { return static_cast<std::size_t>(count_) * kernels::dtype_size(dtype_); }
  kernels::DType dtype() const { return dtype_; }
  void* data() const { return data_.get(); }
  // A view starting `offset` elements in.
  kernels::Buf at(std::int64_t offset = 0) const;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  std::int64_t count_ = 0;
  kernels::DType dtype_ = kernels::DType::F32;
};

// Bump allocator over one HostBuffer: hands out aligned views; reset() frees them all at once.
class Arena {
 public:
  Arena() = default;
  explicit Arena(std::int64_t bytes);
  kernels::Buf take(std::int64_t count, kernels::DType dtype);
  std::int64_t used_bytes() const { return used_; }
  std::int64_t capacity_bytes() const { return static_cast<std::int64_t>(storage_.bytes()); }
  void reset() { used_ = 0; }

 private:
  HostBuffer storage_;
  std::int64_t used_ = 0;
};

}  // namespace ptrain::runtime
