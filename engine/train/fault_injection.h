// Debug fault injection (PTRAIN_DEBUG_FAULT, TrainerOptions::fault_*): the faults the launcher's,
// the checkpoint's and the straggler report's tests need a rank to suffer at a chosen step.
#pragma once

#include <cstdint>

#include "engine/train/trainer.h"

namespace ptrain::train {

// Before step `next_step` (1-based), rank options.fault_rank runs options.fault_action: "kill"
// (SIGKILL itself), "exit" (exit code 3) or "stall" (sleeps forever); "slow" says it begins (see
// slow_down); elsewhere nothing.
void inject_fault(const TrainerOptions& options, int rank, std::int64_t next_step);

// "slow": from step options.fault_step on, rank options.fault_rank sleeps options.fault_slow_ms
// milliseconds; called inside the step's measured compute (a straggler); elsewhere nothing.
void slow_down(const TrainerOptions& options, int rank, std::int64_t step);

}  // namespace ptrain::train
