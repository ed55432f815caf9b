#include "engine/plan/rank_params.h"

#include <algorithm>
#include <map>

namespace ptrain::plan {

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

RankParams count_rank_params(const std::vector<model::LocalParam>& local, int pp, int zero_ranks) {
  RankParams r;
  constexpr std::int64_t kTensorMultiple = 16;  // model::ParamStore: 64-byte aligned tensors
  // Units as the engine's ParamStore cuts them: the embedding, each layer, final norm + head.
  constexpr int kEmbeddingUnit = -1;
  std::map<int, std::int64_t> dense_in, expert_in;  // per unit
  bool tied_here = false;  // the head reuses the embedding's unit on this rank
  for (const model::LocalParam& p : local) {
    const std::int64_t n = p.numel();
    const int unit = p.info->placement == model::Placement::Embedding ? kEmbeddingUnit
                     : p.info->placement == model::Placement::Layer   ? p.info->layer
                                                                      : 1 << 30;
    if (p.info->expert >= 0) {
      r.expert += n;
      expert_in[unit] += n;
    } else {
      dense_in[unit] += round_up(n, kTensorMultiple);
    }
    if (p.info->tied_head && pp > 1) r.tied_embedding = n;
    if (p.info->tied_head && pp == 1) tied_here = true;
  }
  std::map<int, std::int64_t> per_unit;
  for (auto& [unit, n] : dense_in) {
    n = round_up(n, kTensorMultiple * zero_ranks);
    r.dense += n;
    per_unit[unit] += n;
  }
  for (const auto& [unit, n] : expert_in) per_unit[unit] += n;
  for (const auto& [unit, n] : per_unit) {
    r.largest_unit = std::max(r.largest_unit, n);
    if (unit != kEmbeddingUnit) r.largest_other_unit = std::max(r.largest_other_unit, n);
  }
  if (tied_here && per_unit.count(kEmbeddingUnit) > 0) r.tied_unit = per_unit[kEmbeddingUnit];
  return r;
}

}  // namespace ptrain::plan
