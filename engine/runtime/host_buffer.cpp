#include "engine/runtime/host_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace ptrain::runtime {
namespace {
constexpr std::size_t kAlignment = 64;  // a cache line; also enough for AVX-512 loads
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

HostBuffer::HostBuffer(std::int64_t count, kernels::DType dtype) : count_(count), dtype_(dtype) {
  if (count < 0) throw std::invalid_argument("HostBuffer: negative size");
  const std::size_t bytes = round_up(std::max<std::size_t>(this->bytes(), 1), kAlignment);
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  data_.reset(p);
}

kernels::Buf HostBuffer::at(std::int64_t offset) const {
  return {static_cast<char*>(data_.get()) + static_cast<std::size_t>(offset) * kernels::dtype_size(dtype_), dtype_};
}

Arena::Arena(std::int64_t bytes) : storage_((bytes + 3) / 4, kernels::DType::I32 /* in 4-byte units */) {}

kernels::Buf Arena::take(std::int64_t count, kernels::DType dtype) {
  const std::int64_t begin = static_cast<std::int64_t>(round_up(static_cast<std::size_t>(used_), kAlignment));
  const std::int64_t end = begin + count * static_cast<std::int64_t>(kernels::dtype_size(dtype));
  if (end > capacity_bytes())
    throw std::logic_error("activation arena too small: need " + std::to_string(end) + " bytes, have " +
                           std::to_string(capacity_bytes()));
  used_ = end;
  return {static_cast<char*>(storage_.data()) + begin, dtype};
}

}  // namespace ptrain::runtime
