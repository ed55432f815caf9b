// Debug fault injection (PTRAIN_DEBUG_FAULT, TrainerOptions::fault_*): the faults the launcher's
// and the checkpoint's tests need a rank to suffer at a chosen step.
#pragma once

#include <cstdint>

#include "engine/train/trainer.h"

namespace ptrain::train {

// Before step `next_step` (1-based), rank options.fault_rank runs options.fault_action: "kill"
// (SIGKILL itself), "exit" (exit code 3) or "stall" (sleeps forever); elsewhere nothing.
void inject_fault(const TrainerOptions& options, int rank, std::int64_t next_step);

}  // namespace ptrain::train
