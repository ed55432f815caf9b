#include "engine/plan/fp8_refusal.h"

#include <algorithm>
#include <vector>

#include "engine/config/fp8_cuda.h"

namespace ptrain::plan {
namespace {

bool same_limit(const config::EngineLimit& a, const config::EngineLimit& b) {
  return a.key == b.key && a.message == b.message;
}

}  // namespace

std::optional<config::EngineLimit> fp8_refusal(const config::JobSpec& spec, const HardwareProfile& hw) {
  config::JobSpec fp8 = spec;
  fp8.train.precision = config::Precision::Fp8;
  if (!hw.runs_fp8())
    return config::EngineLimit{
        "train.precision",
        "fp8 on cluster.gpu " + hw.name + ", which has no FP8 tensor cores (compute capability 8.9 or later)",
        "use cluster.gpu: h100-sxm or h200 for fp8"};
  // FP8's limits are the ones the job has in fp8 beyond those it has in bf16 (which `run` refuses
  // whatever the precision, and plan warns of in the layout it writes).
  config::JobSpec bf16 = spec;
  bf16.train.precision = config::Precision::Bf16;
  const std::vector<config::EngineLimit> without = config::engine_limits(bf16);
  for (const config::EngineLimit& limit : config::engine_limits(fp8)) {
    const bool fp8_only = std::none_of(without.begin(), without.end(), [&](const config::EngineLimit& other) {
      return same_limit(limit, other);
    });
    if (fp8_only) return limit;
  }
  // cuBLASLt's shapes where the job runs on the GPU plan times it for (backend: auto resolves to it).
  const bool on_gpu =
      fp8.backend == config::Backend::Cuda || (fp8.backend == config::Backend::Auto && !hw.device_is_host());
  if (on_gpu)
    if (const std::optional<config::Fp8CudaRefusal> refused = config::fp8_shape_refusal(fp8))
      return config::EngineLimit{refused->key, refused->reason, refused->fix};
  return std::nullopt;
}

}  // namespace ptrain::plan
