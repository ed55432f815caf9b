// logging.trace for a run: the dist::Trace that the rank's pipeline (F/B/W, waits), its Comm
// (every collective and message) and the trainer (steps, optimizer, validation, checkpoints) record
// into, written by rank 0 as one Chrome trace at the end (comm/trace.h); on a backend with a
// timeline of its own (CUDA) also its streams as the device ran them.
#pragma once

#include <memory>

#include "engine/comm/comm.h"
#include "engine/comm/parallel_groups.h"
#include "engine/comm/trace.h"
#include "engine/config/job_spec.h"
#include "engine/train/run_records.h"
#include "kernels/ops.h"

namespace ptrain::train {

// nullptr without logging.trace. Collective when the job has one: every rank leaves one barrier and
// starts its clock there. Rank 0 makes the file's folder; when it cannot write the file every rank
// throws std::invalid_argument (bad input, naming logging.trace), before the first step rather than
// after the last. Rank 0's first span names the job that writes the trace: "job" (category
// "record"), args {"job_digest", "command"} of `source` (run_records.h), for `ptrain report` to draw
// the trace only beside the segment of that job.
std::unique_ptr<dist::Trace> open_run_trace(const config::JobSpec& spec, dist::Comm& comm,
                                            const dist::ParallelGroups& groups, const kernels::Ops& backend,
                                            const RunSegmentSource& source);

}  // namespace ptrain::train
