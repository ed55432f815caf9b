#include "engine/train/run_trace.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace ptrain::train {

std::unique_ptr<dist::Trace> open_run_trace(const config::JobSpec& spec, dist::Comm& comm,
                                            const dist::ParallelGroups& groups, const kernels::Ops& backend) {
  if (spec.logging.trace.empty()) return nullptr;
  std::string refusal;
  if (comm.rank() == 0) {
    std::error_code ignored;  // a folder that cannot be made shows up as the open failing
    const std::filesystem::path parent = std::filesystem::path(spec.logging.trace).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
    if (!std::ofstream(spec.logging.trace, std::ios::trunc))
      refusal = "logging.trace: cannot open '" + spec.logging.trace + "' for writing";
  }
  comm.broadcast_string(comm.world_group(), refusal, 0);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
  const std::string label = "rank " + std::to_string(comm.rank()) + " (pp " + std::to_string(groups.pp_rank) +
                            ", tp " + std::to_string(groups.tp_rank) + ", dp " + std::to_string(groups.dp_rank) +
                            ", ep " + std::to_string(groups.ep_rank) + ")";
  auto trace = std::make_unique<dist::Trace>(comm.rank(), label);
  trace->start(comm);
  trace->attach_device(backend);
  return trace;
}

}  // namespace ptrain::train
