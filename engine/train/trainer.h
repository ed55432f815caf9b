// The training loop of one rank: per step, its pipeline stage's forward and backward of this
// data-parallel rank's microbatches in the schedule's order (PipelineStage; gradients accumulate
// and are reduced by ZeRO as units finish), clip by global norm, AdamW, metrics (rank 0), periodic
// validation and checkpoints (every rank writes its shards).
// Every decision that must agree across ranks (stop, NaN) is taken collectively once per step,
// after its backward and before its update (when the host waits for the device anyway); a stop
// takes effect at the end of that step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/config/job_spec.h"
#include "engine/comm/comm.h"
#include "engine/train/run_records.h"
#include "engine/train/startup.h"
#include "engine/train/typical_step.h"
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
  std::optional<TypicalStep> typical_step;  // this run's steps, where it ran any
};

struct TrainerOptions {
  const std::atomic<bool>* stop_requested = nullptr;  // polled once per step
  std::int64_t stop_after_steps = 0;  // > 0: stop (checkpointing) after this many steps of this run
  // Debug fault injection (PTRAIN_DEBUG_FAULT): before step fault_step (1-based) rank fault_rank
  // runs fault_action: "kill" (SIGKILL itself), "exit" (exit code 3), "stall" (sleeps forever), or
  // from that step on "slow" (sleeps fault_slow_ms inside each step's compute).
  int fault_rank = -1;
  std::int64_t fault_step = 0;
  std::string fault_action;
  int fault_slow_ms = 0;
  // Start-up before the trainer (job, backend, rendezvous); it adds its own parts and the first
  // step's, and rank 0 prints them after that step.
  StartupTimes startup;
  // How `ptrain run` was started: recorded where the run's records begin its segment (run_records.h).
  RunSegmentSource segment;
};

class Trainer {
 public:
  // Throws data::DataError / ckpt::CheckpointError for bad files, std::invalid_argument for a job
  // the engine cannot run. `comm` spans the job's world (spec.world ranks) and outlives the trainer.
  Trainer(const config::JobSpec& spec, const kernels::Ops& ops, dist::Comm& comm, TrainerOptions options = {});
  ~Trainer();
  RunResult run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ptrain::train
