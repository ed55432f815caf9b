#include "engine/train/shard_mirror.h"

#include <cstring>

namespace ptrain::train {
namespace {

// The shard's buffers, in a fixed order.
std::vector<float*> buffers(const model::FlatShard& s) { return {s.params, s.exp_avg, s.exp_avg_sq}; }

}  // namespace

ShardMirror::ShardMirror(const kernels::Ops& memory, std::vector<model::FlatShard> shards, Copy copy)
    : memory_(memory), device_(std::move(shards)) {
  const bool host_memory = memory_.device() == kernels::Device::Cpu;
  if (host_memory && copy == Copy::WhereNeeded) {
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
      if (!host_memory && copy == Copy::Always)
        pins_.emplace_back(memory_, storage_.back().data(), storage_.back().size() * sizeof(float));
      *targets[i] = storage_.back().data();
    }
    host_.push_back(h);
  }
}

bool ShardMirror::mirrors(const std::vector<model::FlatShard>& shards) const {
  if (shards.size() != device_.size()) return false;
  for (std::size_t k = 0; k < shards.size(); ++k)
    if (shards[k].range.begin != device_[k].range.begin || shards[k].range.end != device_[k].range.end ||
        buffers(shards[k]) != buffers(device_[k]))
      return false;
  return true;
}

void ShardMirror::download() {
  if (passes_through()) return;
  const bool host_memory = memory_.device() == kernels::Device::Cpu;
  for (std::size_t k = 0; k < device_.size(); ++k) {
    const std::vector<float*> from = buffers(device_[k]), to = buffers(host_[k]);
    const auto bytes = static_cast<std::size_t>(device_[k].range.size()) * sizeof(float);
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (from[i] == nullptr) continue;
      if (host_memory)
        std::memcpy(to[i], from[i], bytes);
      else
        memory_.copy_to_host(to[i], {from[i], kernels::DType::F32}, bytes);
    }
  }
}

void ShardMirror::upload() {
  if (passes_through()) return;
  const bool host_memory = memory_.device() == kernels::Device::Cpu;
  for (std::size_t k = 0; k < device_.size(); ++k) {
    const std::vector<float*> to = buffers(device_[k]), from = buffers(host_[k]);
    const auto bytes = static_cast<std::size_t>(device_[k].range.size()) * sizeof(float);
    for (std::size_t i = 0; i < to.size(); ++i) {
      if (to[i] == nullptr) continue;
      if (host_memory)
        std::memcpy(to[i], from[i], bytes);
      else
        memory_.copy_to_device({to[i], kernels::DType::F32}, from[i], bytes);
    }
  }
}

double ShardMirror::host_bytes() const {
  double bytes = 0;
  for (const std::vector<float>& s : storage_) bytes += static_cast<double>(s.size()) * sizeof(float);
  return bytes;
}

}  // namespace ptrain::train
