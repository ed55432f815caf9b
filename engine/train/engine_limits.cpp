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
  if (spec.model.arch == config::Arch::Mixtral)
    limits.push_back({"model.arch", "MoE layers (mixtral) are not executed yet: `ptrain run` refuses them",
                      "use arch gpt2 or llama to train now"});
  if (p.pp > 1 && on_gpu)
    limits.push_back({"parallel.pp", "pipeline parallelism runs on the CPU backend only for now",
                      "set backend: cpu, or pp: 1 on the GPU"});
  return limits;
}

}  // namespace ptrain::train
