#include "engine/config/engine_limits.h"

#include <cstdlib>
#include <cstring>

#include "engine/config/job_grid.h"

namespace ptrain::config {
namespace {

// Whether an ep group holds two ranks of one tp group or one cp group (parallel.order puts the ep
// axis across them): then an expert's rows of one microbatch arrive as several blocks on one rank,
// where FP8's current amaxes are taken per block and reduced over the tp and cp groups, which run
// other experts (model/block_linears.h). Every ep group is a translate of rank 0's.
bool ep_groups_cross_tp_or_cp(const JobSpec& spec) {
  const grid::RankGrid grid = job_grid(spec);
  const grid::Group group = grid.expert_group_of(0, "ep");
  for (const int rank : group)
    for (const grid::Axis axis : {grid::Axis::Tp, grid::Axis::Cp})
      if (grid.coord(rank, axis) != grid.coord(group.front(), axis)) return true;
  return false;
}

bool fp8_on_cuda(const JobSpec& spec) {
  return spec.train.precision == Precision::Fp8 && spec.backend != Backend::Cpu;
}

bool unchecked_variable_set() {
  const char* value = std::getenv(kFp8CudaUncheckedVariable);
  return value != nullptr && std::strcmp(value, "unchecked") == 0;
}

}  // namespace

bool fp8_on_cuda_unchecked(const JobSpec& spec) { return fp8_on_cuda(spec) && unchecked_variable_set(); }

std::vector<EngineLimit> engine_limits(const JobSpec& spec) {
  const ParallelSpec& p = spec.parallel;
  std::vector<EngineLimit> limits;
  // MoE routing is per sequence (model/moe_block.h): the block must see the tp group's tokens.
  if (spec.model.arch == Arch::Mixtral && p.tp > 1 && !p.sequence_parallel)
    limits.push_back({"parallel.sequence_parallel",
                      "MoE layers (mixtral) with parallel.tp = " + std::to_string(p.tp) +
                          " take the tp group's tokens all-gathered: `ptrain run` needs sequence parallelism",
                      "set parallel.sequence_parallel: true"});
  // FP8 (docs/fp8.md): the CUDA FP8 GEMMs are written and compiled but have not run on a GPU.
  if (fp8_on_cuda(spec) && !unchecked_variable_set())
    limits.push_back({"backend",
                      "train.precision: fp8 runs on the CPU backend only for now (FP8 training's numerics); "
                      "the CUDA FP8 GEMMs have not yet passed their checks on a GPU",
                      "set backend: cpu, or train.precision: bf16 on a GPU"});
  if (spec.train.precision == Precision::Fp8 && spec.model.moe && p.ep > 1 && !p.experts_over_tp &&
      ep_groups_cross_tp_or_cp(spec))
    limits.push_back({"parallel.order",
                      "train.precision: fp8 with parallel.order " + p.order +
                          ": its ep groups hold ranks of one tp or cp group, whose tokens reach an expert as "
                          "separate blocks that FP8's per-block amaxes would not combine",
                      "put ep after tp and cp in parallel.order (e.g. tp-cp-dp-ep-pp: ep over data-parallel "
                      "ranks), or ep = tp on the tp groups"});
  return limits;
}

}  // namespace ptrain::config
