// The training loop of one rank: per step, every microbatch forward and backward (gradients
// accumulate), clip by global norm, AdamW, metrics, periodic validation and checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/config/job_spec.h"
#include "kernels/ops.h"

namespace ptrain::train {

enum class RunStatus {
  Completed,    // every step done
  Interrupted,  // a stop was requested (SIGINT/SIGTERM): checkpointed at a step boundary
  NonFinite,    // loss or gradient norm became NaN/inf; the step is in `failed_step`
};

struct RunResult {
  RunStatus status = RunStatus::Completed;
  std::int64_t steps_done = 0;  // including those of a resumed checkpoint
  std::int64_t failed_step = 0;
  double final_loss = 0;
};

struct TrainerOptions {
  const std::atomic<bool>* stop_requested = nullptr;  // polled at step boundaries
  std::int64_t stop_after_steps = 0;  // > 0: stop (checkpointing) after this many steps of this run
};

class Trainer {
 public:
  // Throws data::DataError / ckpt::CheckpointError for bad files, std::invalid_argument for a job
  // the engine cannot run.
  Trainer(const config::JobSpec& spec, const kernels::Ops& ops, TrainerOptions options = {});
  ~Trainer();
  RunResult run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ptrain::train
