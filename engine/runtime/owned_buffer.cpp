#include "engine/runtime/owned_buffer.h"

#include <stdexcept>
#include <string>

namespace ptrain::runtime {
namespace {
constexpr std::size_t kAlignment = 64;  // of arena views: a cache line; also enough for AVX-512 loads
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void ReleaseTo::operator()(void* p) const {
  if (memory != nullptr) memory->release(p);
}

OwnedBuffer::OwnedBuffer(const kernels::Ops& memory, std::int64_t count, kernels::DType dtype)
    : data_(nullptr, ReleaseTo{&memory}), count_(count), dtype_(dtype) {
  if (count < 0) throw std::invalid_argument("OwnedBuffer: negative size");
  data_.reset(memory.allocate(bytes()));
}

kernels::Buf OwnedBuffer::at(std::int64_t offset) const {
  return advance({data_.get(), dtype_}, offset);
}

Arena::Arena(const kernels::Ops& memory, std::int64_t bytes)
    : storage_(memory, (bytes + 3) / 4, kernels::DType::I32 /* in 4-byte units */) {}

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
