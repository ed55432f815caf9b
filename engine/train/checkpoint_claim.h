// The run's claim on checkpoint.dir: rank 0 locks it for the job before any rank reads it, and
// every rank learns whether it could.
#pragma once

#include <memory>

#include "engine/ckpt/dir_lock.h"
#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"

namespace ptrain::train {

// Rank 0 claims checkpoint.dir for the job (ckpt/dir_lock.h: why rank 0, and how) before any rank
// reads it, and tells every rank whether it could: when it could not, all of them fail alike, as
// on bad input, rather than the others waiting in a collective rank 0 never joins. The lock on
// rank 0 (nullptr elsewhere, and without checkpoint.dir).
std::unique_ptr<ckpt::CheckpointDirLock> claim_checkpoint_dir(const config::JobSpec& spec, dist::Comm& comm);

}  // namespace ptrain::train
