// The job a run trained, kept beside its metrics: `ptrain run` writes the job file with its --set
// overrides applied (config::yaml_with_values) as job.yaml in logging.metrics' directory, where
// `ptrain report RUN_DIR` reads it for the run's predictions. Rank 0 only, once the run holds its
// checkpoint.dir and has resumed (a run refused there leaves the previous record); a failure to
// write it is a warning (the run itself does not need it).
#pragma once

#include <string>
#include <vector>

#include "engine/train/run_records.h"

namespace ptrain::app {

// What the run records of how it was started (train/run_records.h): the command, and the job file's
// text with the overrides' values (config::yaml_with_values); job_yaml is empty where the file
// cannot be read again.
train::RunSegmentSource run_segment_source(const std::string& job_path, const std::vector<std::string>& overrides);

// `job_path` and `overrides`: as given to `ptrain run`, `source` made of them; `metrics_path`:
// logging.metrics (nothing is written when it is empty). Earlier segments' jobs stay in the metrics
// (their "segment" rows), so the record follows the run's last segment. The job file itself is never replaced: when job.yaml would be it, the
// overrides (if any) are named in a warning instead; nor is a job.yaml that a run did not write
// (its first line says who did), with a warning.
void record_run_job(const std::string& job_path, const std::vector<std::string>& overrides,
                    const std::string& metrics_path, const train::RunSegmentSource& source);

}  // namespace ptrain::app
