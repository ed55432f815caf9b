// Process exit codes (docs/commands.md): the contract scripts and launchers rely on.
#pragma once

namespace ptrain::app {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeFailure = 1;  // a rank died, NaN, I/O
inline constexpr int kExitBadInput = 2;        // config, files, flags
// `run --max-restarts N` under srun/mpirun: a runtime failure with restarts left; a requeue script
// starts the job again (scripts/sbatch_example.sh). 75 is sysexits.h's EX_TEMPFAIL: try again later.
inline constexpr int kExitRestart = 75;

}  // namespace ptrain::app
