// The job each segment of a run trained (train/run_records.h), with validate's estimate of it, for
// `ptrain report` to judge each stretch of the run by its own layout: the job the segment's first
// metrics row records; `--job` for every segment where given; RUN_DIR/job.yaml for the rows of a run
// that recorded no segment.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/job_loading.h"
#include "app/report_metrics.h"
#include "engine/config/loader.h"
#include "engine/plan/estimate.h"

namespace ptrain::app {

struct LoadedJob {
  config::LoadResult job;
  std::optional<plan::Estimate> estimate;
  std::string digest;  // train::job_digest of the recorded YAML; empty for a job file
};

struct SegmentJob {
  const RunSegment* segment = nullptr;
  std::shared_ptr<LoadedJob> loaded;  // shared by segments of the same job; null: no job known
};

// One per metrics.segments, in order. `given`: --job with its --set (job_path empty: none);
// `beside`: RUN_DIR/job.yaml ("" where there is none), used only where no row records a segment.
// --set applies to recorded jobs too. nullopt after printing the problems of a job that does not
// load (bad input).
std::optional<std::vector<SegmentJob>> segment_jobs(const RunMetrics& metrics, const JobArgs& given,
                                                    const std::string& beside, const std::string& metrics_path);

// A segment's recorded `key` ("command", "layout", "job") as text; "" where it has none.
std::string recorded_text(const RunSegment& segment, const char* key);

}  // namespace ptrain::app
