#include "engine/plan/rank_params.h"

#include <algorithm>
#include <map>

#include "engine/plan/zero3_gathers.h"

namespace ptrain::plan {

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

RankParams count_rank_params(const config::JobSpec& spec, const std::vector<model::LocalParam>& local,
                             int pp_rank) {
  const int pp = spec.parallel.pp, zero_ranks = spec.parallel.dp * spec.parallel.cp;
  RankParams r;
  // Units as the engine's ParamStore cuts them (model::unit_key): the embedding, each layer, final
  // norm + head.
  model::ParamInfo embedding;
  embedding.placement = model::Placement::Embedding;
  const int embedding_unit = model::unit_key(embedding);
  std::map<int, std::int64_t> dense_in, expert_in;  // per unit
  bool tied_here = false;  // the head reuses the embedding's unit on this rank
  for (const model::LocalParam& p : local) {
    const std::int64_t n = p.numel();
    const int unit = model::unit_key(*p.info);
    if (p.info->expert >= 0) {
      r.expert += n;
      expert_in[unit] += n;
    } else {
      dense_in[unit] += round_up(n, model::kFlatAlignment);
    }
    if (p.info->tied_head && pp > 1) r.tied_embedding = n;
    if (p.info->tied_head && pp == 1) tied_here = true;
  }
  std::map<int, std::int64_t> per_unit;
  for (auto& [unit, n] : dense_in) {
    n = round_up(n, model::kFlatAlignment * zero_ranks);
    r.dense += n;
    per_unit[unit] += n;
  }
  for (const auto& [unit, n] : expert_in) per_unit[unit] += n;
  for (const auto& [unit, n] : per_unit) {
    r.largest_unit = std::max(r.largest_unit, n);
    if (unit != embedding_unit) r.largest_other_unit = std::max(r.largest_other_unit, n);
  }
  if (tied_here && per_unit.count(embedding_unit) > 0) r.tied_unit = per_unit[embedding_unit];
  if (zero_ranks > 1) {  // whatever the ZeRO stage: plan's search varies it over the same counts
    const Zero3Gathers gathers = zero3_gathers(spec, local, pp_rank, model::kFlatAlignment * zero_ranks);
    r.zero3_gathered = gathers.elements;
    r.zero3_gather_calls = gathers.calls;
  }
  return r;
}

}  // namespace ptrain::plan
