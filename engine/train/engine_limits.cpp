#include "engine/train/engine_limits.h"

namespace ptrain::train {

std::vector<EngineLimit> engine_limits(const config::JobSpec& spec, bool on_gpu) {
  const config::ParallelSpec& p = spec.parallel;
  std::vector<EngineLimit> limits;
  auto not_yet = [&](const char* key, int degree, const char* what) {
    if (degree > 1)
      limits.push_back({key,
                        std::string(what) + " is not executed yet: `ptrain run` refuses " + key + " = " +
                            std::to_string(degree) + " (validate and plan model it)",
                        std::string("set ") + key + ": 1 to train this job now"});
  };
  not_yet("parallel.ep", p.ep, "expert parallelism");
  // MoE routing is per sequence (model/moe_block.h): a rank must hold whole sequences.
  if (spec.model.arch == config::Arch::Mixtral) {
    if (p.tp > 1)
      limits.push_back({"parallel.tp",
                        "MoE layers (mixtral) run with parallel.tp = 1 for now: `ptrain run` refuses tp = " +
                            std::to_string(p.tp) + " (validate and plan model it)",
                        "set parallel.tp: 1 (use dp, pp and ZeRO) to train this model now"});
    if (p.cp > 1)
      limits.push_back({"parallel.cp",
                        "MoE layers (mixtral) run with parallel.cp = 1 for now: `ptrain run` refuses cp = " +
                            std::to_string(p.cp) + " (validate and plan model it)",
                        "set parallel.cp: 1 to train this model now"});
  }
  if (p.pp > 1 && on_gpu)
    limits.push_back({"parallel.pp", "pipeline parallelism runs on the CPU backend only for now",
                      "set backend: cpu, or pp: 1 on the GPU"});
  return limits;
}

}  // namespace ptrain::train
