#include "engine/train/shard_mirror.h"

namespace ptrain::train {
namespace {

// The shard's buffers, in a fixed order.
std::vector<float*> buffers(const model::FlatShard& s) { return {s.params, s.exp_avg, s.exp_avg_sq}; }

}  // namespace

ShardMirror::ShardMirror(const kernels::Ops& memory, std::vector<model::FlatShard> shards)
    : memory_(memory), device_(std::move(shards)) {
  if (memory_.device() == kernels::Device::Cpu) {
    host_ = device_;
    return;
  }
  for (const model::FlatShard& s : device_) {
    model::FlatShard h{s.range, nullptr, nullptr, nullptr};
    float** targets[] = {&h.params, &h.exp_avg, &h.exp_avg_sq};
    const std::vector<float*> sources = buffers(s);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (sources[i] == nullptr) continue;
      storage_.emplace_back(static_cast<std::size_t>(s.range.size()));
      *targets[i] = storage_.back().data();
    }
    host_.push_back(h);
  }
}

void ShardMirror::download() {
  if (memory_.device() == kernels::Device::Cpu) return;
  for (std::size_t k = 0; k < device_.size(); ++k) {
    const std::vector<float*> from = buffers(device_[k]), to = buffers(host_[k]);
    const auto bytes = static_cast<std::size_t>(device_[k].range.size()) * sizeof(float);
    for (std::size_t i = 0; i < from.size(); ++i)
      if (from[i] != nullptr) memory_.copy_to_host(to[i], {from[i], kernels::DType::F32}, bytes);
  }
}

void ShardMirror::upload() {
  if (memory_.device() == kernels::Device::Cpu) return;
  for (std::size_t k = 0; k < device_.size(); ++k) {
    const std::vector<float*> to = buffers(device_[k]), from = buffers(host_[k]);
    const auto bytes = static_cast<std::size_t>(device_[k].range.size()) * sizeof(float);
    for (std::size_t i = 0; i < to.size(); ++i)
      if (to[i] != nullptr) memory_.copy_to_device({to[i], kernels::DType::F32}, from[i], bytes);
  }
}

}  // namespace ptrain::train
