// What every rank of one job starts from, for the rendezvous to tell its job's store from another
// job's (rendezvous.cpp adds the world size and refuses a rank whose identity differs from rank 0's).
#pragma once

#include <string>

#include "app/job_loading.h"
#include "engine/config/job_spec.h"

namespace ptrain::app {

// A digest of the job file as read and of the --set overrides that change what the ranks compute
// together. Left out: overrides of what only rank 0 uses (logging.metrics, logging.tensorboard,
// logging.every: the step line and the records; each rank's log file sits beside its own
// logging.metrics; logging.straggler_ratio and straggler_steps: rank 0's warning), so that ranks
// started torchrun-style, each given its own records' path, are one job. logging.trace counts only
// as on or off (`spec`, the job as loaded): every rank records its spans and joins in writing the
// trace, wherever rank 0 writes it.
std::string job_identity(const JobArgs& job, const config::JobSpec& spec);

}  // namespace ptrain::app
