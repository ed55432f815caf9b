// The real pipeline of one step, read from a run's trace (logging.trace), in the simulator's terms:
// a pipeline::SimResult whose timeline holds each pp rank's F/B/W of that step, so the schedule's own
// drawing (pipeline::render_svg) shows the measured step beside the simulated one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/pipeline/simulator.h"

namespace ptrain::app {

struct MeasuredStep {
  std::int64_t step = 0;
  pipeline::SimResult timeline;  // times in seconds from the step's first start on any of the ranks
};

// The last step every pp rank of the replica at tp 0, cp 0, dp 0, ep 0 recorded (the ranks found by
// their process names, "rank 2 (pp 1, tp 0, cp 0, dp 0, ep 0)"), or nullopt when the trace lacks one
// of them. A rank's ops come from its device track where it has one (CUDA), else from its host
// track. std::invalid_argument ("traceEvents[12] \"pid\" is not a whole number ...") for a trace
// that is not one logging.trace writes.
std::optional<MeasuredStep> measured_step(const nlohmann::json& trace, int pp);

// The job that wrote the trace: the "job_digest" of its "job" span (category "record",
// train/run_trace.h), or nullopt for a trace that names none (written before runs named it).
std::optional<std::string> trace_job_digest(const nlohmann::json& trace);

}  // namespace ptrain::app
