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
  // FP8 (docs/fp8.md): built so far are its numerics on the CPU, both scalings, MoE without ep.
  if (spec.train.precision == config::Precision::Fp8) {
    if (spec.backend != config::Backend::Cpu)
      limits.push_back({"backend",
                        "train.precision: fp8 runs on the CPU backend only for now (FP8 training's numerics); "
                        "the CUDA FP8 GEMMs are not built yet",
                        "set backend: cpu, or train.precision: bf16 on a GPU"});
    // An expert's rows hold several ranks' microbatches under ep > 1 where one rank takes one at a
    // time: its amaxes (current) would span them, and its first step's too (delayed): not built.
    if (spec.model.moe && p.ep > 1)
      limits.push_back({"parallel.ep",
                        "train.precision: fp8 with parallel.ep = " + std::to_string(p.ep) +
                            ": an expert's FP8 casts over several ranks' microbatches are not built yet",
                        "set parallel.ep: 1 (the experts in FP8 on every rank), or train.precision: bf16"});
  }
  return limits;
}

}  // namespace ptrain::train
