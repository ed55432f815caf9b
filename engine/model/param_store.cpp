#include "engine/model/param_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/runtime/philox.h"

namespace ptrain::model {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class InitKind { Zeros, Ones, Normal, ResidualNormal };

InitKind init_kind(const ParamInfo& p) {
  if (p.shape.size() == 1) return ends_with(p.name, ".bias") ? InitKind::Zeros : InitKind::Ones;
  // Projections whose output is added to the residual stream.
  for (const char* s : {"attn.c_proj.weight", "mlp.c_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight",
                        ".w2.weight"}) {
    if (ends_with(p.name, s)) return InitKind::ResidualNormal;
  }
  return InitKind::Normal;
}

}  // namespace

ParamStore::ParamStore(std::vector<ParamInfo> registry, const ShardCoords& coords, StoreOptions options)
    : registry_(std::move(registry)),
      coords_(coords),
      memory_(options.memory ? options.memory : &kernels::cpu_ops()),
      param_dtype_(options.param_dtype) {
  std::vector<LocalParam> local = local_params(registry_, coords_);
  layout_ = flat_layout(local, options.unit_multiple, options.expert_unit_multiple, experts_apart(coords_));
  for (std::size_t i = 0; i < local.size(); ++i) {
    const std::int64_t n = local[i].numel();
    index_.emplace(local[i].info->name, slots_.size());
    slots_.push_back({std::move(local[i]), layout_.offsets[i], n, layout_.tensor_unit[i]});
  }
  if (options.own_params) params_ = runtime::OwnedBuffer(*memory_, layout_.numel, param_dtype_);
  if (options.own_grads) grads_ = runtime::OwnedBuffer(*memory_, layout_.numel, kernels::DType::F32);
  for (const FlatRange& u : layout_.units) {
    param_base_.push_back(options.own_params ? params_.at(u.begin).ptr : nullptr);
    grad_base_.push_back(options.own_grads ? grads() + u.begin : nullptr);
  }
}

const ParamSlot& ParamStore::slot(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("no parameter '" + name + "' on this rank");
  return slots_[it->second];
}

std::int64_t ParamStore::largest_unit() const {
  std::int64_t n = 0;
  for (const FlatRange& u : layout_.units) n = std::max(n, u.size());
  return n;
}

float* ParamStore::params() const {
  if (param_dtype_ != kernels::DType::F32)
    throw std::logic_error(std::string("ParamStore::params: the parameters are ") + kernels::to_string(param_dtype_));
  return static_cast<float*>(params_.data());
}

kernels::Buf ParamStore::param(TensorAt t) const {
  if (t.slot == nullptr) return {};
  const ParamSlot& s = *t.slot;
  void* base = param_base_[static_cast<size_t>(s.unit)];
  if (base == nullptr) throw std::logic_error("parameters of '" + s.local.info->name + "' are not resident");
  return runtime::advance({base, param_dtype_}, s.offset - layout_.units[static_cast<size_t>(s.unit)].begin + t.offset);
}

kernels::Buf ParamStore::grad(TensorAt t) const {
  if (t.slot == nullptr) return {};
  const ParamSlot& s = *t.slot;
  float* base = grad_base_[static_cast<size_t>(s.unit)];
  if (base == nullptr) throw std::logic_error("gradients of '" + s.local.info->name + "' have no buffer bound");
  return {base + (s.offset - layout_.units[static_cast<size_t>(s.unit)].begin + t.offset), kernels::DType::F32};
}

void ParamStore::initialize(std::uint64_t seed, int layers) {
  if (params() == nullptr) throw std::logic_error("ParamStore::initialize: no owned parameter buffer");  // F32 only
  initialize_range(*memory_, seed, layers, {0, layout_.numel}, params_.at());
}

void ParamStore::initialize_range(const kernels::Ops& ops, std::uint64_t seed, int layers, FlatRange range,
                                  kernels::Buf dst) const {
  const float std_normal = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * static_cast<float>(layers));
  auto at = [&](std::int64_t element) { return runtime::advance(dst, element - range.begin); };
  // Slots lie in ascending offsets; the padding between them (and past the last) is zeroed, and
  // each slot's own elements are written once, below.
  std::int64_t written = range.begin;
  auto zero_up_to = [&](std::int64_t end) {
    if (end > written) ops.fill(at(written), 0.0f, end - written);
  };
  for (const ParamSlot& s : slots_) {
    const std::int64_t lo = std::max(range.begin, s.offset), hi = std::min(range.end, s.offset + s.numel);
    if (lo >= hi) continue;
    zero_up_to(lo);
    written = hi;
    const ParamInfo& info = *s.local.info;
    const InitKind kind = init_kind(info);
    if (kind == InitKind::Zeros || kind == InitKind::Ones) {
      ops.fill(at(lo), kind == InitKind::Ones ? 1.0f : 0.0f, hi - lo);
      continue;
    }
    const float stddev = kind == InitKind::ResidualNormal ? std_residual : std_normal;
    const std::uint64_t key = runtime::packed(runtime::stream_key(seed, runtime::name_hash(info.name)));
    // The rank's blocks of the tensor (tp_block_runs: equal blocks at a constant global stride
    // as one run), cut to [lo, hi): one fill_normal per run.
    for (const TpBlockRun& run : tp_block_runs(info, coords_.tp_rank, coords_.tp, lo - s.offset, hi - s.offset))
      ops.fill_normal(at(s.offset + run.local), run.rows, run.cols, key, static_cast<std::uint64_t>(run.global),
                      static_cast<std::uint64_t>(run.stride), stddev);
  }
  zero_up_to(range.end);
}

void ParamStore::zero_grads() {
  if (grads() != nullptr) memory_->fill(grads_.at(), 0.0f, layout_.numel);
}

}  // namespace ptrain::model
