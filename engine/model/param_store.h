// ParamStore: this rank's parameters in one flat buffer and their gradients in another, laid out
// in registry order, so ZeRO shards and gradient buckets are just offset ranges (llm.c style).
// Initialisation draws every element from (seed, parameter name, global element index): any
// layout starts from bitwise the same full weights.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model/param_registry.h"
#include "engine/runtime/host_buffer.h"
#include "kernels/buffer.h"

namespace ptrain::model {

struct ParamSlot {
  LocalParam local;
  std::int64_t offset = 0;  // elements from the start of the flat buffers
  std::int64_t numel = 0;
};

class ParamStore {
 public:
  ParamStore(std::vector<ParamInfo> registry, const ShardCoords& coords);

  const std::vector<ParamSlot>& slots() const { return slots_; }
  const std::vector<ParamInfo>& registry() const { return registry_; }
  const ShardCoords& coords() const { return coords_; }
  std::int64_t numel() const { return params_.size(); }

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const ParamSlot& slot(const std::string& name) const;  // throws std::out_of_range naming it
  kernels::Buf param(const std::string& name) const { return params_.at(slot(name).offset); }
  kernels::Buf grad(const std::string& name) const { return grads_.at(slot(name).offset); }

  float* params() const { return static_cast<float*>(params_.data()); }
  float* grads() const { return static_cast<float*>(grads_.data()); }

  // GPT-2 / Megatron scheme: N(0, 0.02) for weights, 0.02/sqrt(2*layers) for the projections that
  // write into the residual stream, ones for norm weights, zeros for biases.
  void initialize(std::uint64_t seed, int layers);
  void zero_grads();

 private:
  std::vector<ParamInfo> registry_;  // owns what slots_ point into
  ShardCoords coords_;
  std::vector<ParamSlot> slots_;
  std::unordered_map<std::string, std::size_t> index_;
  runtime::HostBuffer params_, grads_;
};

// The global flat index of every element of a rank's slice, in local storage order. Used for
// initialisation and checkpoints (which slice of the global tensor a rank holds).
std::vector<std::int64_t> global_indices(const ParamInfo& info, int tp_rank, int tp);

}  // namespace ptrain::model
