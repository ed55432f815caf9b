#include "engine/plan/rank_params.h"

#include <algorithm>
#include <map>

namespace ptrain::plan {

RankParams count_rank_params(const std::vector<model::LocalParam>& local, int pp) {
  RankParams r;
  // Units as the engine's ParamStore cuts them: the embedding, each layer, final norm + head.
  constexpr int kEmbeddingUnit = -1;
  std::map<int, std::int64_t> per_unit;
  bool tied_here = false;  // the head reuses the embedding's unit on this rank
  for (const model::LocalParam& p : local) {
    const std::int64_t n = p.numel();
    (p.info->expert >= 0 ? r.expert : r.dense) += n;
    const int unit = p.info->placement == model::Placement::Embedding ? kEmbeddingUnit
                     : p.info->placement == model::Placement::Layer   ? p.info->layer
                                                                      : 1 << 30;
    per_unit[unit] += n;
    if (p.info->tied_head && pp > 1) r.tied_embedding = n;
    if (p.info->tied_head && pp == 1) tied_here = true;
  }
  for (const auto& [unit, n] : per_unit) {
    r.largest_unit = std::max(r.largest_unit, n);
    if (unit != kEmbeddingUnit) r.largest_other_unit = std::max(r.largest_other_unit, n);
  }
  if (tied_here && per_unit.count(kEmbeddingUnit) > 0) r.tied_unit = per_unit[kEmbeddingUnit];
  return r;
}

}  // namespace ptrain::plan
