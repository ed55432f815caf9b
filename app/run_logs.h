// Where a process of `ptrain run` (or `profile`) stands in the logs (engine/log): who it says it is
// on every line, and its file in the run directory, the directory of logging.metrics (beside
// metrics.jsonl and job.yaml): logs/rank_<R>.log for each rank, logs/launcher.log for the local
// launcher.
#pragma once

#include <optional>

#include "engine/config/diagnostics.h"
#include "engine/config/job_spec.h"
#include "engine/launch/worker_env.h"

namespace ptrain::app {

// A rank of `env`'s job; without one, the local launcher of a `world`-rank job, or its one rank.
void log_as(const std::optional<dist::WorkerEnv>& env, int world);

// This process's log file, appended to (a later run adds to an earlier run's); none without
// logging.metrics. One that cannot be opened is a warning: the run goes on, its lines on stderr.
void open_run_log(const config::JobSpec& spec, const std::optional<dist::WorkerEnv>& env);

// The job's problems, then its warnings: what validate prints as its report, in a run log lines
// like the run's others (the train logger).
void log_diagnostics(const config::Diagnostics& diags);

}  // namespace ptrain::app
