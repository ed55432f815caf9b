// What `ptrain run --max-restarts N` needs outside the launcher (engine/launch/launcher.h, Restarts):
// which attempt this process is, the note a restart's log line ends with, and the exit code that
// asks a requeue script for a restart where ptrain does not own the processes (srun, mpirun).
#pragma once

#include <string>

#include "engine/config/job_spec.h"

namespace ptrain::app {

// This process's attempt: 0 the first time, k at the k-th restart. PTRAIN_RESTART_ATTEMPT (the local
// launcher sets it; a requeue script may), else SLURM_RESTART_COUNT (Slurm counts requeues), else 0.
int restart_attempt();

// "; resuming from step 8 (the latest checkpoint in runs/x/ckpt); the run had logged step 11: 3 steps
// are trained again", from checkpoint.dir's newest complete checkpoint and the last row of
// logging.metrics; parts that cannot be told are left out.
std::string resume_note(const config::JobSpec& spec);

// The exit code of a rank that failed with `code` under srun, mpirun or RANK/WORLD_SIZE: kExitRestart
// where a runtime failure (1) has restarts left (attempt < max_restarts), else `code`.
int requeue_exit_code(int code, int max_restarts, int attempt);

}  // namespace ptrain::app
