#include "engine/train/engine_limits.h"

namespace ptrain::train {

std::vector<EngineLimit> engine_limits(const config::JobSpec& spec, bool on_gpu) {
  const config::ParallelSpec& p = spec.parallel;
  std::vector<EngineLimit> limits;
  // MoE routing is per sequence (model/moe_block.h): a rank must hold whole sequences.
  if (spec.model.arch == config::Arch::Mixtral) {
    auto whole_sequences = [&](const char* key, int degree) {
      if (degree > 1)
        limits.push_back(
            {key,
             std::string("MoE layers (mixtral) run with ") + key + " = 1 for now: `ptrain run` refuses " +
                 std::string(key) + " = " + std::to_string(degree) + " (validate and plan model it)",
             std::string("set ") + key + ": 1 (use dp, ep, pp and ZeRO) to train this model now"});
    };
    whole_sequences("parallel.tp", p.tp);
    whole_sequences("parallel.cp", p.cp);
    if (p.ep > 1 && p.zero == 3)
      limits.push_back({"parallel.zero",
                        "ZeRO-3 does not shard the experts of parallel.ep = " + std::to_string(p.ep) +
                            " yet: `ptrain run` refuses zero 3 with ep > 1 (validate and plan model it)",
                        "set parallel.zero: 2 (or parallel.ep: 1) to train this model now"});
  }
  if (p.pp > 1 && on_gpu)
    limits.push_back({"parallel.pp", "pipeline parallelism runs on the CPU backend only for now",
                      "set backend: cpu, or pp: 1 on the GPU"});
  return limits;
}

}  // namespace ptrain::train
