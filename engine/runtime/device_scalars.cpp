#include "engine/runtime/device_scalars.h"

#include <stdexcept>
#include <string>

namespace ptrain::runtime {

DeviceScalars::DeviceScalars(const kernels::Ops& memory, int count)
    : memory_(memory), values_(memory, count, kernels::DType::F32), host_(static_cast<std::size_t>(count)) {}

kernels::Buf DeviceScalars::at(int i) const {
  if (i < 0 || i >= size())
    throw std::out_of_range("DeviceScalars::at(" + std::to_string(i) + ") of " + std::to_string(size()));
  return values_.at(i);
}

double DeviceScalars::read_sum(int count) const {
  if (count < 0 || count > size())
    throw std::out_of_range("DeviceScalars::read_sum(" + std::to_string(count) + ") of " +
                            std::to_string(size()));
  memory_.copy_to_host(host_.data(), values_.at(), static_cast<std::size_t>(count) * sizeof(float));
  double total = 0;
  for (int i = 0; i < count; ++i) total += host_[static_cast<std::size_t>(i)];
  return total;
}

}  // namespace ptrain::runtime
