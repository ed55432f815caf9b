#include "engine/plan/memory_limit.h"

#include <algorithm>

namespace ptrain::plan {

MemoryLimit memory_limit(const config::JobSpec& spec, const HardwareProfile& hw) {
  if (!hw.device_is_host()) return {hw.memory_bytes, 1, false};
  const double host = spec.cluster.host_memory_gb > 0 ? spec.cluster.host_memory_gb * 1e9 : hw.memory_bytes;
  return {host, std::max(1, std::min(spec.cluster.gpus_per_node, spec.world)), true};
}

}  // namespace ptrain::plan
