// Whose records a run's logging paths hold (logging.metrics and the job.yaml beside it,
// logging.trace, logging.tensorboard), and how a run goes on with them.
//
// The rule, as Megatron-LM and TorchTitan users expect it: a run that resumes continues its own
// records; a run never destroys another's. The records belong to the run of a checkpoint.dir: the
// first metrics row of each segment (each start of `ptrain run`) carries a "segment" object naming
// it, with the command, the layout and the job as trained. A run whose checkpoint.dir is the one the
// records name (or the same seen from the metrics' folder: a run directory moved or copied whole)
// continues them after the step it resumes from (0 when that run saved nothing): the rows of later
// steps are dropped (they are trained again), and its own first row opens a new segment, a boundary
// that `ptrain report` draws. A run of another checkpoint.dir, or one without any, whose paths hold
// another run's records is refused (exit 2) with the fix, before anything is written. Records that
// name no run (written before segments were recorded, or a trace or TensorBoard events without
// metrics) are continued by a run that resumes from a checkpoint and refused to one that starts
// from the beginning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"

namespace ptrain::train {

class MetricsLog;

// What `ptrain run` was given, recorded at the boundary of the segment it starts.
struct RunSegmentSource {
  std::string command;   // the job file and its --set overrides ("configs/x.yaml --set parallel.pp=2")
  std::string job_yaml;  // the job as trained: the file with the overrides' values (job.yaml's body)
};

// The identity of a job as trained, for a trace to name the job that wrote it: 16 hex digits of
// its recorded YAML.
std::string job_digest(const std::string& job_yaml);

// The "segment" object of a segment's first row (MetricsLog::start_segment adds its number and
// after_step): command, checkpoint_dir (absolute; "" without one), checkpoint_dir_from_metrics (the
// same from logging.metrics' folder), world, layout, job_digest, job.
nlohmann::ordered_json segment_record(const config::JobSpec& spec, const RunSegmentSource& source);

// Why this run may not write its records where the job says, as an error at a key with its fix; none
// where the paths hold nothing or this run's own records. `resume_step`: the step the run resumes
// from (0: from the beginning).
struct RecordsRefusal {
  std::string key, message, fix;
  std::string text() const { return key + ": " + message + " (fix: " + fix + ")"; }
};
std::optional<RecordsRefusal> refuse_records(const config::JobSpec& spec, std::int64_t resume_step);

// Whether `dir` holds TensorBoard event files (events.out.tfevents.*).
bool holds_event_files(const std::string& dir);

// Collective, once the run knows the step it resumes from: rank 0 (which holds `log`, nullptr
// elsewhere) checks the paths (refuse_records) and starts the run's segment of its records
// (MetricsLog::start_segment). Where rank 0 refuses, or cannot open them, every rank throws as it
// does: std::invalid_argument (bad input, exit 2) naming the key and the fix, else runtime_error.
void start_run_records(const config::JobSpec& spec, dist::Comm& comm, MetricsLog* log, std::int64_t resume_step,
                       const RunSegmentSource& source);

}  // namespace ptrain::train
