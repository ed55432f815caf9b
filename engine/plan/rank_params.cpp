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

bool experts_in_layer_units(const config::ParallelSpec& p) {
  return p.ep == 1 && p.tp == 1;
}

FlatUnits flat_units(const std::vector<model::LocalParam>& local, std::int64_t unit_multiple,
                     bool with_experts) {
  FlatUnits u;
  for (const model::LocalParam& p : local) {
    if (p.info->expert >= 0 && !with_experts) continue;
    const int key = model::unit_key(*p.info, false);
    if (u.key.empty() || key != u.key.back()) {  // a new unit starts
      const int index = u.count();
      u.key.push_back(key);
      u.chunk.push_back(p.info->placement == model::Placement::Layer ? p.chunk : -1);
      u.size.push_back(0);
      if (p.info->placement == model::Placement::Embedding)
        u.embedding = index;
      else if (p.info->placement != model::Placement::Layer)
        u.final = index;
    }
    u.size.back() += round_up(p.numel(), model::kFlatAlignment);
    u.tied = u.tied || p.info->tied_head;
  }
  for (std::int64_t& s : u.size) s = round_up(s, unit_multiple);
  return u;
}

RankParams count_rank_params(const config::JobSpec& spec, const pipeline::Schedule& schedule,
                             const std::vector<model::LocalParam>& local, int pp_rank) {
  const int pp = spec.parallel.pp, zero_ranks = spec.parallel.dp * spec.parallel.cp;
  RankParams r;
  const bool with_experts = experts_in_layer_units(spec.parallel);
  const FlatUnits units = flat_units(local, model::kFlatAlignment * zero_ranks, with_experts);
  std::map<int, std::int64_t> per_unit;  // by unit key: dense (padded) and expert elements
  for (int u = 0; u < units.count(); ++u) {
    r.dense += units.size[static_cast<std::size_t>(u)];
    per_unit[units.key[static_cast<std::size_t>(u)]] += units.size[static_cast<std::size_t>(u)];
  }
  // Experts apart: each layer's in a unit of their own, padded as the flat buffer pads it (each
  // tensor to kFlatAlignment, the unit to a multiple of kFlatAlignment per expert-dp rank).
  const std::int64_t expert_multiple =
      model::kFlatAlignment * spec.parallel.tp * spec.parallel.cp * spec.parallel.dp / spec.parallel.ep;
  std::map<int, std::int64_t> expert_units;
  for (const model::LocalParam& p : local) {
    if (p.info->expert >= 0 && !with_experts)
      expert_units[model::unit_key(*p.info, true)] += round_up(p.numel(), model::kFlatAlignment);
    if (p.info->tied_head && pp > 1) r.tied_embedding = p.numel();
  }
  for (const auto& [key, n] : expert_units) {
    r.expert += round_up(n, expert_multiple);
    per_unit[key] += round_up(n, expert_multiple);
  }
  const int embedding_key = units.embedding >= 0 ? units.key[static_cast<std::size_t>(units.embedding)] : 0;
  for (const auto& [key, n] : per_unit) {
    r.largest_unit = std::max(r.largest_unit, n);
    if (units.embedding < 0 || key != embedding_key) r.largest_other_unit = std::max(r.largest_other_unit, n);
  }
  // The head reuses the embedding's unit on this rank.
  if (pp == 1 && units.tied && units.embedding >= 0) r.tied_unit = per_unit[embedding_key];
  if (zero_ranks > 1) {  // whatever the ZeRO stage: plan's search varies it over the same counts
    const Zero3Gathers gathers = zero3_gathers(schedule, units, pp_rank);
    r.zero3_gathered = gathers.elements;
    r.zero3_gather_calls = gathers.calls;
  }
  return r;
}

}  // namespace ptrain::plan
