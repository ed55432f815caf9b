#include "engine/train/engine_limits.h"

#include "engine/config/job_grid.h"

namespace ptrain::train {
namespace {

// Whether the experts are split over exactly the tp groups: ep = tp, and the expert grid's ep groups
// are the dense grid's tp groups (as the default order makes them, with cp = 1).
bool experts_split_over_tp(const config::JobSpec& spec) {
  if (spec.parallel.ep != spec.parallel.tp) return false;
  std::vector<std::string> problems;
  const grid::RankGrid grid = config::make_job_grid(spec, &problems);
  return problems.empty() && grid.groups("tp") == grid.expert_groups("ep");
}

}  // namespace

std::vector<EngineLimit> engine_limits(const config::JobSpec& spec) {
  const config::ParallelSpec& p = spec.parallel;
  std::vector<EngineLimit> limits;
  // MoE routing is per sequence (model/moe_block.h): the block must see the tp group's tokens.
  if (spec.model.arch == config::Arch::Mixtral) {
    if (p.tp > 1 && !p.sequence_parallel)
      limits.push_back(
          {"parallel.sequence_parallel",
           "MoE layers (mixtral) with parallel.tp = " + std::to_string(p.tp) +
               " take the tp group's tokens all-gathered: `ptrain run` needs sequence parallelism",
           "set parallel.sequence_parallel: true"});
    if (p.tp > 1 && p.ep == p.tp && !experts_split_over_tp(spec))
      limits.push_back(
          {"parallel.order",
           "MoE layers (mixtral) with parallel.ep = parallel.tp = " + std::to_string(p.tp) +
               " split their experts over the tp group: `ptrain run` needs the ep groups on the tp groups, "
               "which order " + p.order + " does not give (validate and plan model it)",
           "set parallel.order: tp-cp-ep-dp-pp, or another parallel.ep"});
  }
  return limits;
}

}  // namespace ptrain::train
