// The memory a job's ranks must fit, the same for validate's check, the nearest layout that fits
// and plan's search. A GPU rank has its device to itself (cluster.gpu's memory). CPU ranks share
// their host: a node's min(cluster.gpus_per_node, world) ranks together hold at most the host's
// memory, cluster.host_memory_gb when given, else the cpu profile's (hardware.h); and there a rank
// holds everything it keeps, its offloaded optimizer state too.
#pragma once

#include "engine/config/job_spec.h"
#include "engine/plan/hardware.h"
#include "engine/plan/memory.h"

namespace ptrain::plan {

struct MemoryLimit {
  double bytes = 0;   // what the ranks sharing it may hold together
  int ranks = 1;      // the ranks that share it: 1 on a GPU, a node's on a CPU host
  bool host = false;  // the host's memory (CPU ranks), not a device's

  // What one rank holds against the limit: its device's bytes; on the host also what it offloads
  // and its async checkpoint's copy.
  double rank_bytes(const MemoryBreakdown& m) const { return m.total() + (host ? m.host_total() : 0); }
  // What the ranks sharing the limit hold when each holds `m`.
  double shared_bytes(const MemoryBreakdown& m) const { return rank_bytes(m) * ranks; }
  bool fits(const MemoryBreakdown& m) const { return shared_bytes(m) <= bytes; }
};

MemoryLimit memory_limit(const config::JobSpec& spec, const HardwareProfile& hw);

}  // namespace ptrain::plan
