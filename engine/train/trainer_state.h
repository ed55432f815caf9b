// Trainer::State, one rank's trainer (trainer.h), private to engine/train. Its parts live in files
// of their own: set-up and the loop of steps (trainer.cpp), one step and validation
// (trainer_step.cpp), restore and the cross-rank save protocol (trainer_checkpoint.cpp); what a step
// costs is accounted in step_accounting.h, debug faults are injected by fault_injection.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/dir_lock.h"
#include "engine/ckpt/hf.h"
#include "engine/comm/parallel_groups.h"
#include "engine/comm/trace.h"
#include "engine/data/datasets.h"
#include "engine/model/fp8_history.h"
#include "engine/model/param_store.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/expert_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/runtime/device_scalars.h"
#include "engine/train/background_save.h"
#include "engine/train/evaluation.h"
#include "engine/train/grad_norm.h"
#include "engine/train/metrics.h"
#include "engine/train/pipeline_stage.h"
#include "engine/train/step_accounting.h"
#include "engine/train/stragglers.h"
#include "engine/train/trainer.h"
#include "engine/zero/data_parallel.h"

namespace ptrain::train {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Trainer::State {
  Clock::time_point constructed = Clock::now();  // first: before the members allocate
  const config::JobSpec& spec;
  const kernels::Ops& ops;
  TrainerOptions options;
  dist::Comm& comm;
  dist::ParallelGroups groups;
  const dist::Group& dp_group;
  bool leader;  // world rank 0: logs, commits checkpoints
  std::unique_ptr<ckpt::CheckpointDirLock> dir_lock;  // rank 0, with checkpoint.dir: held while training
  std::optional<parallel::TensorParallel> tensor_parallel;  // tp > 1
  std::optional<parallel::ContextParallel> context_parallel;  // cp > 1
  std::optional<parallel::ExpertParallel> expert_parallel;    // ep > 1
  model::ParamStore params;
  PipelineStage pipeline;
  parallel::DataParallel zero;
  std::unique_ptr<BackgroundSave> background;  // checkpoint.async with checkpoint.dir: the save in flight
  GradNorm global_norm;  // of the gradients, and clipping
  std::unique_ptr<data::TokenSource> train_source, valid_source;
  data::BatchLoader train_loader;
  std::unique_ptr<Evaluation> evaluation;  // data.valid, with eval_every > 0
  std::unique_ptr<MetricsLog> log;  // rank 0 only
  runtime::DeviceScalars loss_sums;  // one per microbatch of a step or an evaluation
  std::unique_ptr<model::Fp8History> fp8_history;  // train.fp8.scaling delayed
  double flops_per_step = 0;  // model FLOPs of the whole job's step
  double peak_flops = 0;      // of the whole job (world * device peak)
  std::int64_t start_step = 0;
  std::int64_t last_saved_step = -1;
  StepAccounting accounting;  // what the previous step's report counted
  StragglerWatch stragglers{spec.logging.straggler_ratio, spec.logging.straggler_steps};  // rank 0 warns
  std::unique_ptr<dist::Trace> trace;  // logging.trace: what this rank ran, when

  State(const config::JobSpec& s, const kernels::Ops& backend, dist::Comm& c, TrainerOptions opts);
  ~State() { comm.set_trace(nullptr); }  // the Comm outlives the trainer

  RunResult run();  // Trainer::run: the steps, then the trace
  RunResult run_steps();

  // How the ParamStore is laid out for ZeRO over the dp-cp group (and the experts over expert-dp).
  model::StoreOptions store_options(const kernels::Ops& memory) const {
    return parallel::zero_store_options(spec, dp_group.size(), memory,
                                        groups.expert_dp != nullptr ? groups.expert_dp->size() : 0);
  }

  // A line of the run's log, said on every rank (rank 0's reach the terminal).
  void note(std::string line) const;

  // trainer_checkpoint.cpp. Resumes from checkpoint.dir (resume: auto) or imports checkpoint.load_hf,
  // else initialises from the seed; returns the steps already done. Every rank reads what it holds.
  std::int64_t restore();
  ckpt::HfImportResult import_hf_weights(const std::string& dir);
  // Writes step `step` (steps done) to checkpoint.dir on every rank (in the background with
  // checkpoint.async); rank 0 commits it.
  void save(std::int64_t step);
  void wait_for_background_write(const std::string& before);
  void settle_save(std::int64_t steps_done, const std::string& before);
  void finish_save(BackgroundSave::Pending done);
  nlohmann::json checkpoint_state(std::int64_t step) const;
  std::string commit_or_abandon(BackgroundSave::Pending& done, const std::vector<std::string>& reports);

  // trainer_step.cpp.
  struct StepOutcome {
    double loss = 0;  // the mean over the global batch's tokens
    double grad_norm = 0;
    StepCosts costs;
    double optimizer_seconds = 0;  // this rank's; the next report takes the most
    bool stop = false;  // every rank agreed to stop after this step
  };
  StepOutcome train_step(std::int64_t step, double lr);  // one optimizer step (`step` steps done before it)
  void record_fp8_amaxes(double grad_norm);
  double global_loss();
  double update(std::int64_t step, double lr, double grad_norm);
  double validation_loss(const Evaluation::Batches& batches);
  bool stop_agreed(std::int64_t steps_done);

  double tokens_per_step() const { return static_cast<double>(spec.train.global_batch) * spec.model.seq_len; }
  // Whether this rank's losses count in the world's sum: those of the last stage's ranks, of tp rank 0
  // only (every tp rank computes the same).
  bool holds_loss() const { return pipeline.computes_loss() && groups.tp_rank == 0; }
  double memory_bytes() const {
    const parallel::ZeroBytes z = zero.allocated_bytes();
    return z.params + z.grads + z.optimizer + z.windows + static_cast<double>(pipeline.activation_bytes()) +
           (fp8_history ? static_cast<double>(fp8_history->device_bytes()) : 0.0) +
           static_cast<double>(pipeline.fp8_weight_copy_bytes());
  }
};

}  // namespace ptrain::train
