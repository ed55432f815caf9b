#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/parallel_groups.h"
#include "engine/config/engine_limits.h"
#include "engine/log/log.h"
#include "engine/model/layer_description.h"
#include "engine/optim/lr_schedule.h"
#include "engine/plan/flops.h"
#include "engine/plan/hardware.h"
#include "engine/train/checkpoint_claim.h"
#include "engine/train/fault_injection.h"
#include "engine/train/run_trace.h"
#include "engine/train/trainer_state.h"

namespace ptrain::train {
namespace {

// This rank's groups, after refusing what this build's engine does not execute yet.
dist::ParallelGroups step_groups(const config::JobSpec& spec, dist::Comm& comm) {
  const std::vector<config::EngineLimit> limits = config::engine_limits(spec);
  if (!limits.empty())
    throw std::invalid_argument(limits.front().key + ": " + limits.front().message +
                                " (fix: " + limits.front().fix + ")");
  if (comm.rank() == 0 && config::fp8_on_cuda_unchecked(spec))
    log::train().warn("train.precision: fp8 on the CUDA backend, allowed by {}=unchecked: its kernels have not yet "
                      "passed their checks on a GPU", config::kFp8CudaUncheckedVariable);
  const std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
  const bool tied = std::any_of(registry.begin(), registry.end(), [](const model::ParamInfo& i) { return i.tied_head; });
  return dist::make_parallel_groups(spec, comm, tied);
}

}  // namespace

Trainer::State::State(const config::JobSpec& s, const kernels::Ops& backend, dist::Comm& c, TrainerOptions opts)
    : spec(s),
      ops(backend),
      options(std::move(opts)),
      comm(c),
      groups(step_groups(s, c)),
      dp_group(*groups.dp),
      leader(c.rank() == 0),
      dir_lock(claim_checkpoint_dir(s, c)),
      tensor_parallel(groups.tp == nullptr ? std::nullopt
                                           : std::make_optional<parallel::TensorParallel>(
                                                 c, backend, *groups.tp, groups.kv_copies,
                                                 s.parallel.sequence_parallel)),
      context_parallel(groups.cp == nullptr
                           ? std::nullopt
                           : std::make_optional<parallel::ContextParallel>(
                                 c, backend, *groups.cp, s.train.micro_batch, s.model.seq_len,
                                 s.parallel.cp_comm, model::ring_message_bytes(s))),
      expert_parallel(groups.ep == nullptr
                          ? std::nullopt
                          : std::make_optional<parallel::ExpertParallel>(c, backend, *groups.ep)),
      params(model::build_registry(s.model),
             model::shard_coords(s, groups.pp_rank, groups.tp_rank, groups.ep_rank),
             store_options(backend)),
      pipeline(s, params, backend, c, groups.pp, tensor_parallel ? &*tensor_parallel : nullptr,
               context_parallel ? &*context_parallel : nullptr,
               expert_parallel ? &*expert_parallel : nullptr, s.train.microbatches),
      zero(s, params, backend, c, dp_group, {groups.tp, groups.embedding, groups.expert_dp}),
      global_norm(params, zero, backend, c,
                  {&dp_group, groups.tp, groups.pp, groups.embedding != nullptr && groups.pp_rank != 0}),
      train_source(data::open_train_source(s)),
      valid_source(data::open_valid_source(s)),
      train_loader(data::make_train_loader(s, *train_source, groups.dp_rank)),
      loss_sums(backend, Evaluation::kBatches * train_loader.microbatches()),  // evaluation batches slice alike
      accounting(c, groups) {
  if (valid_source && s.data.eval_every > 0)  // its tokens checked before the first step
    evaluation = std::make_unique<Evaluation>(s, *valid_source, groups.dp_rank, pipeline, c, holds_loss());
  if (leader) log = std::make_unique<MetricsLog>(s.logging.metrics, s.logging.tensorboard, s.train.steps, s.logging.every);
  if (dir_lock)
    for (const std::string& w : dir_lock->warnings()) note("warning: " + w);
  pipeline.set_hooks(&zero);
  if (!s.checkpoint.dir.empty() && s.checkpoint.async) background = std::make_unique<BackgroundSave>(zero.shard_memory());
  if (s.train.precision == config::Precision::Fp8 && s.train.fp8.scaling == config::Fp8Scaling::Delayed) {
    fp8_history = std::make_unique<model::Fp8History>(backend, s.model.layers, model::fp8_linears_per_layer(s.model),
                                                      s.train.fp8.amax_history);
    pipeline.set_fp8_history(fp8_history.get());
  }
  const auto weights_begin = Clock::now();
  options.startup.allocation_s = std::chrono::duration<double>(weights_begin - constructed).count();
  start_step = restore();
  start_run_records(s, c, log.get(), start_step, options.segment);  // or refuses another run's records
  options.startup.weights_s = seconds_since(weights_begin);
  last_saved_step = start_step;
  if (background) background->prepare(zero.saved_shards());  // the copy's pages faulted in off the step
  if (train_loader.microbatches() != s.train.microbatches)
    throw std::logic_error("the data loader's microbatches differ from the job's");
  flops_per_step = plan::step_flops(s, plan::matmul_params(params.registry(), s.model)).model;
  const plan::HardwareProfile* hw = plan::find_hardware(s.cluster.gpu);
  peak_flops = hw == nullptr ? 0.0 : hw->peak_flops(s.train.precision) * s.world;
  trace = open_run_trace(s, c, groups, backend, options.segment);
  comm.set_trace(trace.get());
  pipeline.set_trace(trace.get());
  zero.set_trace(trace.get());
}

RunResult Trainer::State::run() {  // the steps, then the trace
  RunResult result = run_steps();
  settle_save(result.steps_done, "the end of the run");  // the last save, written and committed
  if (log) log->close();
  stop_agreed(result.steps_done);  // a record lost at the last step, or on closing, ends the run alike
  if (trace) {
    comm.set_trace(nullptr);
    trace->resolve_device();  // the last optimizer step's
    if (trace->write_merged(comm, spec.logging.trace))
      note("trace written: " + spec.logging.trace + " (open it in Perfetto or chrome://tracing)");
  }
  return result;
}

// A line of the run's log, said on every rank (rank 0's reach the terminal). A line may say its
// level first, as the checkpoint's messages do ("warning: ...", "note: ..."); a warning the whole
// job shares is rank 0's to show on the terminal, and in the other ranks' files.
void Trainer::State::note(std::string line) const {
  spdlog::level::level_enum level = spdlog::level::info;
  if (line.starts_with("warning: ")) {
    line.erase(0, 9);
    if (comm.rank() == 0) level = spdlog::level::warn;
  } else if (line.starts_with("note: ")) {
    line.erase(0, 6);
  }
  ::ptrain::log::train().log(level, line);
}

Trainer::Trainer(const config::JobSpec& spec, const kernels::Ops& ops, dist::Comm& comm, TrainerOptions options)
    : state_(std::make_unique<State>(spec, ops, comm, std::move(options))) {}

Trainer::~Trainer() = default;

RunResult Trainer::run() {
  try {
    return state_->run();
  } catch (...) {  // before the buffers go, which waits for the device: nothing may wait for peers
    state_->comm.abandon_in_flight();
    if (const dist::Trace* trace = state_->trace.get()) {  // what this rank recorded, on its own
      const std::string path = dist::rank_trace_path(state_->spec.logging.trace, state_->comm.rank());
      if (trace->write_own(path))
        log::train().warn("rank {}: its trace so far written to {}", state_->comm.rank(), path);
    }
    throw;
  }
}

RunResult Trainer::State::run_steps() {
  RunResult result;
  result.steps_done = start_step;
  double seconds_total = 0;
  double device_peak = 0;  // the most device memory in use after a step (where the backend measures it)
  std::int64_t timed_steps = 0;
  StepRecord record;
  // A stop requested during start-up (a signal the worker held until its handler was in place, one
  // during the rendezvous) ends the run before its first step, on every rank: nothing new to save.
  if (start_step < spec.train.steps && stop_agreed(start_step)) {
    result.status = RunStatus::Interrupted;
    note("stop requested before the first step: nothing to save");
    return result;
  }
  for (std::int64_t step = start_step; step < spec.train.steps; ++step) {
    inject_fault(options, comm.rank(), step + 1);
    const auto t0 = Clock::now();
    const double lr = optim::learning_rate(spec.optimizer, spec.train.steps, step);
    const StepOutcome outcome = [&] {
      const dist::Trace::Scope span(trace.get(), "step " + std::to_string(step + 1), "step");
      return train_step(step, lr);
    }();
    const double loss = outcome.loss, grad_norm = outcome.grad_norm;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      result.status = RunStatus::NonFinite;
      result.failed_step = step + 1;
      note("non-finite " + std::string(std::isfinite(loss) ? "gradient norm" : "loss") + " at step " +
           std::to_string(step + 1) + ": stopping");
      break;
    }
    const double seconds = seconds_since(t0);
    if (step == start_step) {
      options.startup.first_step_s = seconds;
      note(startup_line(options.startup));
    }
    seconds_total += seconds;
    timed_steps += 1;

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_seconds = seconds;
    m.tokens_per_s = tokens_per_step() / seconds;
    m.mfu = peak_flops > 0 ? flops_per_step / (seconds * peak_flops) : 0.0;
    m.memory_bytes = memory_bytes();
    m.pipeline_bubble = outcome.costs.pipeline_bubble;
    m.comm_bytes = outcome.costs.comm_bytes;
    m.comm_seconds = outcome.costs.comm_seconds;
    m.optimizer_seconds = outcome.optimizer_seconds;
    m.compute_seconds = outcome.costs.compute_seconds;
    m.slowest_rank = outcome.costs.slowest_rank;
    if (const auto in_use = ops.device_bytes_in_use()) {
      device_peak = std::max(device_peak, static_cast<double>(*in_use));
      m.device_memory_peak_bytes = device_peak;
    }
    const double eta = static_cast<double>(spec.train.steps - m.step) * seconds_total / static_cast<double>(timed_steps);
    if (evaluation && (m.step % spec.data.eval_every == 0 || m.step == spec.train.steps)) {
      Evaluation::Batches batches;
      if (const std::exception_ptr unreadable = evaluation->read(batches)) {
        if (log) log->record(m, eta, /*last=*/true);  // trained: recorded and saved before its data ends the run
        save(m.step);
        settle_save(m.step, "the end of the run");
        std::rethrow_exception(unreadable);
      }
      m.val_loss = validation_loss(batches);
    }
    if (log) log->record(m, eta, /*last=*/outcome.stop || m.step == spec.train.steps);
    record.add(m);
    result.steps_done = m.step;
    result.final_loss = loss;
    if (const auto straggler = log ? stragglers.observe(m.step, outcome.costs.slowest_rank) : std::nullopt)
      ::ptrain::log::train().warn(*straggler);
    if (spec.checkpoint.every > 0 && m.step % spec.checkpoint.every == 0 && m.step != spec.train.steps)
      save(m.step);
    if (outcome.stop && m.step != spec.train.steps) {
      result.status = RunStatus::Interrupted;
      note("stop requested: " +
           std::string(spec.checkpoint.dir.empty() ? "stopping (no checkpoint.dir: nothing saved)" : "checkpointing") +
           " after step " + std::to_string(m.step));
      save(m.step);
      result.typical_step = record.typical();
      return result;
    }
  }
  if (result.status == RunStatus::Completed && result.steps_done > start_step) save(result.steps_done);
  result.typical_step = record.typical();
  return result;
}

}  // namespace ptrain::train
