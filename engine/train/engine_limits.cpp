#include "engine/train/engine_limits.h"

namespace ptrain::train {

std::vector<EngineLimit> engine_limits(const config::JobSpec& spec) {
  const config::ParallelSpec& p = spec.parallel;
  std::vector<EngineLimit> limits;
  // MoE routing is per sequence (model/moe_block.h): the block must see the tp group's tokens.
  if (spec.model.arch == config::Arch::Mixtral && p.tp > 1 && !p.sequence_parallel)
    limits.push_back({"parallel.sequence_parallel",
                      "MoE layers (mixtral) with parallel.tp = " + std::to_string(p.tp) +
                          " take the tp group's tokens all-gathered: `ptrain run` needs sequence parallelism",
                      "set parallel.sequence_parallel: true"});
  return limits;
}

}  // namespace ptrain::train
