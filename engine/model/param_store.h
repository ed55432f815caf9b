// ParamStore: this rank's parameters in their flat layout (model/flat_layout.h), so ZeRO shards and
// gradient buckets are just offset ranges (llm.c style). The layout is cut into units: the
// embedding, each transformer layer (and its experts apart), and the final norm with the head. Every
// unit's range is padded to a multiple of `unit_multiple` elements (`expert_unit_multiple` for the
// experts' units), so ZeRO can split each unit evenly over its ranks.
//
// Storage: by default the store owns one full buffer for the parameters and one for the gradients.
// ZeRO may instead keep a unit's parameters or gradients elsewhere (a gathered window, a staging
// buffer) and bind it: param(name) and grad(name) resolve through the unit's current binding.
// Parameters are in `param_dtype` (what the model computes with: F32, or BF16 under mixed
// precision, where the fp32 master weights live with the optimizer); gradients are always F32.
// Initialisation draws every element from (seed, parameter name, global element index): any
// layout starts from bitwise the same full weights.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model/flat_layout.h"
#include "engine/model/param_registry.h"
#include "engine/runtime/owned_buffer.h"
#include "kernels/buffer.h"

namespace ptrain::model {

struct ParamSlot {
  LocalParam local;
  std::int64_t offset = 0;  // elements from the start of the flat layout
  std::int64_t numel = 0;
  int unit = 0;
};

// A view of a range of the flat layout where a rank keeps it: params[0], exp_avg[0] and
// exp_avg_sq[0] belong to flat element range.begin (nullptr: not held). ZeRO ranks hold one such
// range per unit (zero/data_parallel.h hands them out); a single rank holds the whole layout.
// The checkpoint code reads and fills these views (ckpt/param_checkpoint.h).
struct FlatShard {
  FlatRange range;
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

struct StoreOptions {
  std::int64_t unit_multiple = 16;  // every unit's padded size is a multiple of this
  std::int64_t expert_unit_multiple = 16;  // that of the experts' units (model::experts_apart)
  bool own_params = true;           // allocate the full parameter buffer
  bool own_grads = true;            // allocate the full gradient buffer
  const kernels::Ops* memory = nullptr;  // the backend whose memory holds them (nullptr: the CPU's)
  kernels::DType param_dtype = kernels::DType::F32;
};

class ParamStore {
 public:
  ParamStore(std::vector<ParamInfo> registry, const ShardCoords& coords, StoreOptions options = {});

  const std::vector<ParamSlot>& slots() const { return slots_; }
  const std::vector<ParamInfo>& registry() const { return registry_; }
  const ShardCoords& coords() const { return coords_; }
  std::int64_t numel() const { return layout_.numel; }  // of the flat layout, padding included

  // Units in layout order; unit u covers units()[u] (padded). -1 where this rank has no such unit.
  const std::vector<FlatRange>& units() const { return layout_.units; }
  int embedding_unit() const { return layout_.embedding; }
  int final_unit() const { return layout_.final; }
  // Whether unit u holds a layer's experts (model::experts_apart), else dense tensors.
  bool expert_unit(int u) const { return layout_.expert.at(static_cast<std::size_t>(u)); }
  std::int64_t largest_unit() const;

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const ParamSlot& slot(const std::string& name) const;  // throws std::out_of_range naming it
  kernels::Buf param(const std::string& name) const { return param(at(name)); }
  kernels::Buf grad(const std::string& name) const { return grad(at(name)); }

  // Where a tensor sits in the flat layout, `offset` elements into it (a part of a fused tensor),
  // resolved from its name once: the layout never moves a tensor within its unit, while ZeRO moves
  // the unit's storage (binds it), so param(at) and grad(at) view it through the unit's binding at
  // the time of the call, without looking the name up. A default TensorAt is no tensor: its views
  // are null.
  struct TensorAt {
    const ParamSlot* slot = nullptr;
    std::int64_t offset = 0;
  };
  TensorAt at(const std::string& name, std::int64_t offset = 0) const { return {&slot(name), offset}; }
  // Throw std::logic_error naming the tensor where its unit is not bound now.
  kernels::Buf param(TensorAt t) const;
  kernels::Buf grad(TensorAt t) const;

  // The backend whose memory holds the owned buffers.
  const kernels::Ops& memory() const { return *memory_; }
  kernels::DType param_dtype() const { return param_dtype_; }
  // The owned full buffers (null when not owned), in memory()'s device.
  kernels::Buf param_buffer() const { return params_.at(); }
  // The owned full parameter buffer as fp32 (std::logic_error when param_dtype() is not F32).
  float* params() const;
  float* grads() const { return static_cast<float*>(grads_.data()); }
  // Points unit u's parameters (gradients) at `base`, which holds the unit's range from its start
  // (parameters in param_dtype()); nullptr unbinds.
  void bind_params(int unit, void* base) { param_base_.at(static_cast<size_t>(unit)) = base; }
  void bind_grads(int unit, float* base) { grad_base_.at(static_cast<size_t>(unit)) = base; }

  // GPT-2 / Megatron scheme: N(0, 0.02) for weights, 0.02/sqrt(2*layers) for the projections that
  // write into the residual stream, ones for norm weights, zeros for biases; every element the
  // normal sample of its global index in its tensor's own stream (seed, name), so any layout draws
  // the same weights. initialize_range writes only the flat elements [range.begin, range.end) into
  // dst (F32, dst[0] = element range.begin), with `ops`, where dst lives; padding elements are zero.
  // initialize() needs an owned F32 buffer.
  void initialize(std::uint64_t seed, int layers);
  void initialize_range(const kernels::Ops& ops, std::uint64_t seed, int layers, FlatRange range,
                        kernels::Buf dst) const;
  void zero_grads();  // of the owned gradient buffer

 private:
  std::vector<ParamInfo> registry_;  // owns what slots_ point into
  ShardCoords coords_;
  std::vector<ParamSlot> slots_;
  std::unordered_map<std::string, std::size_t> index_;
  FlatLayout layout_;
  const kernels::Ops* memory_;
  kernels::DType param_dtype_;
  runtime::OwnedBuffer params_, grads_;
  std::vector<void*> param_base_;
  std::vector<float*> grad_base_;
};


}  // namespace ptrain::model
