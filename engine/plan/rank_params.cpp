#include "engine/plan/rank_params.h"

#include <algorithm>

#include "engine/plan/zero3_gathers.h"

namespace ptrain::plan {

bool experts_in_layer_units(const config::ParallelSpec& p) {
  return !model::experts_apart(p.tp, p.ep);
}

double updated_elements(const config::JobSpec& spec, const RankParams& params) {
  const config::ParallelSpec& p = spec.parallel;
  if (p.zero == 0) return static_cast<double>(params.dense + params.expert);
  return static_cast<double>(params.dense) / (p.dp * p.cp) +
         static_cast<double>(params.expert) / p.expert_dp();
}

RankParams count_rank_params(const config::JobSpec& spec, const pipeline::ScheduleModel& schedule,
                             const std::vector<model::LocalParam>& local, int pp_rank) {
  const config::ParallelSpec& par = spec.parallel;
  const int zero_ranks = par.dp * par.cp, expert_ranks = par.expert_dp();
  RankParams r;
  const model::FlatLayout layout = model::flat_layout(local, model::kFlatAlignment * zero_ranks,
                                                     model::kFlatAlignment * expert_ranks,
                                                     !experts_in_layer_units(par));
  for (int u = 0; u < layout.count(); ++u) {
    const std::int64_t n = layout.units[static_cast<std::size_t>(u)].size();
    r.largest_unit = std::max(r.largest_unit, n);
    if (layout.expert[static_cast<std::size_t>(u)]) {
      r.expert += n;
      ++r.expert_units;
      r.largest_expert_unit = std::max(r.largest_expert_unit, n);
      continue;
    }
    r.dense += n;
    ++r.dense_units;
    r.largest_dense_unit = std::max(r.largest_dense_unit, n);
    if (u != layout.embedding) r.largest_other_unit = std::max(r.largest_other_unit, n);
  }
  for (const model::LocalParam& p : local) {
    if (p.info->tied_head && par.pp > 1) r.tied_embedding = p.numel();
    if (p.info->fp8_linear) r.fp8_linear += p.numel(), r.fp8_linear_weights += p.info->tp_fused_parts;
  }
  // The head reuses the embedding's unit on this rank.
  if (par.pp == 1 && layout.tied && layout.embedding >= 0)
    r.tied_unit = layout.units[static_cast<std::size_t>(layout.embedding)].size();
  if (zero_ranks > 1 || expert_ranks > 1) {  // whatever the ZeRO stage: plan's search varies it
    const Zero3Gathers gathers = zero3_gathers(schedule, layout, pp_rank);
    r.zero3_gathered = zero_ranks > 1 ? gathers.elements : 0;
    r.zero3_gather_calls = zero_ranks > 1 ? gathers.calls : 0;
    r.zero3_expert_gathered = expert_ranks > 1 ? gathers.expert_elements : 0;
    r.zero3_expert_gather_calls = expert_ranks > 1 ? gathers.expert_calls : 0;
  }
  return r;
}

}  // namespace ptrain::plan
