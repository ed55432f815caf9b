#include "engine/runtime/owned_buffer.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ptrain::runtime {

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
    : storage_(memory, (bytes + 3) / 4, kernels::DType::I32 /* in 4-byte units */),
      base_(static_cast<char*>(storage_.data())),
      capacity_(static_cast<std::int64_t>(storage_.bytes())) {}

Arena Arena::over(kernels::Buf region, std::int64_t bytes) {
  if (reinterpret_cast<std::uintptr_t>(region.ptr) % kAlignment != 0)
    throw std::logic_error("Arena::over: the region is not " + std::to_string(kAlignment) + "-byte aligned");
  Arena arena;
  arena.base_ = static_cast<char*>(region.ptr);
  arena.capacity_ = bytes;
  return arena;
}

std::int64_t Arena::aligned_end(std::int64_t used, std::int64_t count, kernels::DType dtype) {
  const std::int64_t begin = (used + kAlignment - 1) / kAlignment * kAlignment;
  return begin + count * static_cast<std::int64_t>(kernels::dtype_size(dtype));
}

kernels::Buf Arena::take(std::int64_t count, kernels::DType dtype) {
  const std::int64_t end = aligned_end(used_, count, dtype);
  if (end > capacity_)
    throw std::logic_error("activation arena too small: need " + std::to_string(end) + " bytes, have " +
                           std::to_string(capacity_));
  const std::int64_t begin = end - count * static_cast<std::int64_t>(kernels::dtype_size(dtype));
  used_ = end;
  return {base_ + begin, dtype};
}

}  // namespace ptrain::runtime
