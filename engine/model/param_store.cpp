#include "engine/model/param_store.h"

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

std::vector<std::int64_t> global_indices(const ParamInfo& info, int tp_rank, int tp) {
  std::int64_t cols = 1;  // elements per row of dim 0 in the global tensor
  for (size_t d = 1; d < info.shape.size(); ++d) cols *= info.shape[d];
  std::vector<std::int64_t> out;
  out.reserve(static_cast<size_t>(info.numel()));
  const std::vector<RowRange> ranges = tp_row_ranges(info, tp_rank, tp);
  if (info.tp_dim <= 0) {  // whole rows (or replicated): ranges of dim 0
    for (const RowRange& r : ranges)
      for (std::int64_t row = r.begin; row < r.begin + r.length; ++row)
        for (std::int64_t c = 0; c < cols; ++c) out.push_back(row * cols + c);
  } else {  // tp_dim == 1 on a 2-D weight: every row, a range of columns
    for (std::int64_t row = 0; row < info.shape[0]; ++row)
      for (const RowRange& r : ranges)
        for (std::int64_t c = r.begin; c < r.begin + r.length; ++c) out.push_back(row * info.shape[1] + c);
  }
  return out;
}

ParamStore::ParamStore(std::vector<ParamInfo> registry, const ShardCoords& coords)
    : registry_(std::move(registry)), coords_(coords) {
  std::int64_t offset = 0;
  for (LocalParam& lp : local_params(registry_, coords_)) {
    const std::int64_t n = lp.numel();
    index_.emplace(lp.info->name, slots_.size());
    slots_.push_back({std::move(lp), offset, n});
    offset += (n + 15) / 16 * 16;  // 64-byte aligned starts for vector loads
  }
  params_ = runtime::HostBuffer(offset, kernels::DType::F32);
  grads_ = runtime::HostBuffer(offset, kernels::DType::F32);
}

const ParamSlot& ParamStore::slot(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::out_of_range("no parameter '" + name + "' on this rank");
  return slots_[it->second];
}

void ParamStore::initialize(std::uint64_t seed, int layers) {
  const float std_normal = 0.02f;
  const float std_residual = 0.02f / std::sqrt(2.0f * static_cast<float>(layers));
  for (const ParamSlot& s : slots_) {
    const ParamInfo& info = *s.local.info;
    float* dst = params() + s.offset;
    const InitKind kind = init_kind(info);
    if (kind == InitKind::Zeros || kind == InitKind::Ones) {
      const float value = kind == InitKind::Ones ? 1.0f : 0.0f;
      for (std::int64_t i = 0; i < s.numel; ++i) dst[i] = value;
      continue;
    }
    const float stddev = kind == InitKind::ResidualNormal ? std_residual : std_normal;
    const runtime::PhiloxKey key = runtime::stream_key(seed, runtime::name_hash(info.name));
    const std::vector<std::int64_t> idx = global_indices(info, coords_.tp_rank, coords_.tp);
    for (std::int64_t i = 0; i < s.numel; ++i)
      dst[i] = stddev * runtime::normal_at(key, static_cast<std::uint64_t>(idx[static_cast<size_t>(i)]));
  }
}

void ParamStore::zero_grads() { std::memset(grads(), 0, static_cast<size_t>(numel()) * sizeof(float)); }

}  // namespace ptrain::model
