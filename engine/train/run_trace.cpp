#include "engine/train/run_trace.h"

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/io/output_probe.h"

namespace ptrain::train {

std::unique_ptr<dist::Trace> open_run_trace(const config::JobSpec& spec, dist::Comm& comm,
                                            const dist::ParallelGroups& groups, const kernels::Ops& backend,
                                            const RunSegmentSource& source) {
  if (spec.logging.trace.empty()) return nullptr;
  std::string refusal;
  if (comm.rank() == 0) {
    // Written at the end: an earlier run's trace stays whole until then (a run that fails leaves
    // it, not an empty file that `ptrain report` refuses).
    if (const std::string why = io::cannot_write(spec.logging.trace, io::MakeFolder::Yes); !why.empty())
      refusal = "logging.trace: cannot open '" + spec.logging.trace + "' for writing: " + why;
  }
  comm.broadcast_string(comm.world_group(), refusal, 0);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
  const int cp_rank = groups.cp != nullptr ? groups.cp->index : 0;
  const std::string label = "rank " + std::to_string(comm.rank()) + " (pp " + std::to_string(groups.pp_rank) +
                            ", tp " + std::to_string(groups.tp_rank) + ", cp " + std::to_string(cp_rank) +
                            ", dp " + std::to_string(groups.dp_rank) + ", ep " + std::to_string(groups.ep_rank) + ")";
  auto trace = std::make_unique<dist::Trace>(comm.rank(), label);
  trace->start(comm);
  if (comm.rank() == 0) {
    const nlohmann::json args = {{"job_digest", job_digest(source.job_yaml)}, {"command", source.command}};
    const std::string body = args.dump();
    const auto now = dist::Trace::Clock::now();
    trace->add("job", "record", dist::Trace::kSteps, now, now, body.substr(1, body.size() - 2));
  }
  trace->attach_device(backend);
  return trace;
}

}  // namespace ptrain::train
