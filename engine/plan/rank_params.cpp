#include "engine/plan/rank_params.h"

#include <algorithm>
#include <map>

namespace ptrain::plan {

RankParams count_rank_params(const std::vector<model::LocalParam>& local, int pp) {
  RankParams r;
  std::map<int, std::int64_t> per_layer;
  for (const model::LocalParam& p : local) {
    const std::int64_t n = p.numel();
    (p.info->expert >= 0 ? r.expert : r.dense) += n;
    if (p.info->layer >= 0) {
      per_layer[p.info->layer] += n;
    } else {
      r.largest_unit = std::max(r.largest_unit, n);
    }
    if (p.info->tied_head && pp > 1) r.tied_embedding = n;
  }
  for (const auto& [layer, n] : per_layer) r.largest_unit = std::max(r.largest_unit, n);
  return r;
}

}  // namespace ptrain::plan
