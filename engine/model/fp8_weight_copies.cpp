#include "engine/model/fp8_weight_copies.h"

#include <stdexcept>
#include <string>

namespace ptrain::model {

void Fp8WeightCopies::add(int layer, int index, std::int64_t elements) {
  Fp8WeightCopy& copy = copies_[{layer, index}];
  copy.codes = runtime::OwnedBuffer(ops_, elements, kernels::DType::E4M3);
  copy.codes_t = runtime::OwnedBuffer(ops_, elements, kernels::DType::E4M3);
  copy.inv_scale = runtime::OwnedBuffer(ops_, 1, kernels::DType::F32);
  copy.fresh = false;
}

Fp8WeightCopy& Fp8WeightCopies::at(int layer, int index, std::int64_t elements) {
  const auto it = copies_.find({layer, index});
  if (it == copies_.end() || it->second.codes.size() != elements)
    throw std::logic_error("Fp8WeightCopies: no copy of " + std::to_string(elements) + " elements for layer " +
                           std::to_string(layer) + " linear " + std::to_string(index));
  return it->second;
}

void Fp8WeightCopies::weights_changed() {
  for (auto& [key, copy] : copies_) copy.fresh = false;
}

std::int64_t Fp8WeightCopies::device_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [key, copy] : copies_)
    bytes += static_cast<std::int64_t>(copy.codes.bytes() + copy.codes_t.bytes() + copy.inv_scale.bytes());
  return bytes;
}

}  // namespace ptrain::model
