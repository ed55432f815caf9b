#include "engine/plan/rank_params.h"

#include <algorithm>

#include "engine/plan/zero3_gathers.h"

namespace ptrain::plan {

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

bool experts_in_layer_units(const config::ParallelSpec& p) {
  return !model::experts_apart(p.tp, p.ep);
}

FlatUnits flat_units(const std::vector<model::LocalParam>& local, std::int64_t dense_multiple,
                     std::int64_t expert_multiple, bool experts_apart) {
  FlatUnits u;
  int key = 0;
  for (const model::LocalParam& p : local) {
    const int unit_key = model::unit_key(*p.info, experts_apart);
    if (u.count() == 0 || unit_key != key) {  // a new unit starts
      const int index = u.count();
      key = unit_key;
      u.chunk.push_back(p.info->placement == model::Placement::Layer ? p.chunk : -1);
      u.size.push_back(0);
      u.expert.push_back(experts_apart && p.info->expert >= 0);
      if (p.info->placement == model::Placement::Embedding)
        u.embedding = index;
      else if (p.info->placement != model::Placement::Layer)
        u.final = index;
    }
    u.size.back() += round_up(p.numel(), model::kFlatAlignment);
    u.tied = u.tied || p.info->tied_head;
  }
  for (int i = 0; i < u.count(); ++i)
    u.size[static_cast<std::size_t>(i)] =
        round_up(u.size[static_cast<std::size_t>(i)],
                 u.expert[static_cast<std::size_t>(i)] ? expert_multiple : dense_multiple);
  return u;
}

double updated_elements(const config::JobSpec& spec, const RankParams& params) {
  const config::ParallelSpec& p = spec.parallel;
  if (p.zero == 0) return static_cast<double>(params.dense + params.expert);
  return static_cast<double>(params.dense) / (p.dp * p.cp) +
         static_cast<double>(params.expert) / p.expert_dp();
}

RankParams count_rank_params(const config::JobSpec& spec, const pipeline::Schedule& schedule,
                             const std::vector<model::LocalParam>& local, int pp_rank) {
  const config::ParallelSpec& par = spec.parallel;
  const int zero_ranks = par.dp * par.cp, expert_ranks = par.expert_dp();
  RankParams r;
  const FlatUnits units = flat_units(local, model::kFlatAlignment * zero_ranks,
                                     model::kFlatAlignment * expert_ranks, !experts_in_layer_units(par));
  for (int u = 0; u < units.count(); ++u) {
    const std::int64_t n = units.size[static_cast<std::size_t>(u)];
    r.largest_unit = std::max(r.largest_unit, n);
    if (units.expert[static_cast<std::size_t>(u)]) {
      r.expert += n;
      ++r.expert_units;
      r.largest_expert_unit = std::max(r.largest_expert_unit, n);
      continue;
    }
    r.dense += n;
    ++r.dense_units;
    r.largest_dense_unit = std::max(r.largest_dense_unit, n);
    if (u != units.embedding) r.largest_other_unit = std::max(r.largest_other_unit, n);
  }
  for (const model::LocalParam& p : local)
    if (p.info->tied_head && par.pp > 1) r.tied_embedding = p.numel();
  // The head reuses the embedding's unit on this rank.
  if (par.pp == 1 && units.tied && units.embedding >= 0)
    r.tied_unit = units.size[static_cast<std::size_t>(units.embedding)];
  if (zero_ranks > 1 || expert_ranks > 1) {  // whatever the ZeRO stage: plan's search varies it
    const Zero3Gathers gathers = zero3_gathers(schedule, units, pp_rank);
    r.zero3_gathered = zero_ranks > 1 ? gathers.elements : 0;
    r.zero3_gather_calls = zero_ranks > 1 ? gathers.calls : 0;
    r.zero3_expert_gathered = expert_ranks > 1 ? gathers.expert_elements : 0;
    r.zero3_expert_gather_calls = expert_ranks > 1 ? gathers.expert_calls : 0;
  }
  return r;
}

}  // namespace ptrain::plan
