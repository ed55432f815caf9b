#include "engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/hf.h"
#include "engine/ckpt/param_checkpoint.h"
#include "engine/data/datasets.h"
#include "engine/model/param_store.h"
#include "engine/model/transformer.h"
#include "engine/optim/adamw.h"
#include "engine/optim/lr_schedule.h"
#include "engine/plan/flops.h"
#include "engine/plan/hardware.h"
#include "engine/train/metrics.h"

namespace ptrain::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

struct Trainer::State {
  const config::JobSpec& spec;
  TrainerOptions options;
  model::ParamStore params;
  model::Transformer model;
  optim::AdamW optimizer;
  std::unique_ptr<data::TokenSource> train_source, valid_source;
  data::BatchLoader train_loader;
  std::unique_ptr<data::EvalLoader> eval_loader;
  MetricsLog log;
  std::vector<std::int32_t> inputs, targets;
  double flops_per_step = 0;  // model FLOPs of the whole job's step
  double peak_flops = 0;      // of the whole job (world * device peak)
  std::int64_t start_step = 0;
  std::int64_t last_saved_step = -1;

  State(const config::JobSpec& s, const kernels::Ops& ops, TrainerOptions opts)
      : spec(s),
        options(opts),
        params(model::build_registry(s.model), model::shard_coords(s, 0, 0, 0)),
        model(s, params, ops),
        optimizer(s.optimizer, params, ops),
        train_source(data::open_train_source(s)),
        valid_source(data::open_valid_source(s)),
        train_loader(data::make_train_loader(s, *train_source, 0)),
        log(s.logging.metrics, s.train.steps, s.logging.every) {
    params.initialize(s.train.seed, s.model.layers);
    start_step = restore();
    last_saved_step = start_step;
    const std::size_t tokens = static_cast<std::size_t>(s.train.micro_batch) * static_cast<std::size_t>(s.model.seq_len);
    inputs.resize(tokens);
    targets.resize(tokens);
    if (valid_source && s.data.eval_every > 0)
      eval_loader = std::make_unique<data::EvalLoader>(data::make_eval_loader(s, *valid_source, 0, kEvalBatches));
    flops_per_step = plan::step_flops(s, plan::matmul_params(params.registry(), s.model)).model;
    const plan::HardwareProfile* hw = plan::find_hardware(s.cluster.gpu);
    const double device_peak = hw == nullptr ? 0.0
                               : s.train.precision == config::Precision::Bf16 ? hw->peak_flops_bf16
                                                                              : hw->peak_flops_fp32;
    peak_flops = device_peak * s.world;
  }

  static constexpr int kEvalBatches = 4;  // global batches of the validation set per evaluation

  ckpt::MomentBuffers moments() const { return {optimizer.exp_avg(), optimizer.exp_avg_sq()}; }

  // Resumes from checkpoint.dir (resume: auto) or imports checkpoint.load_hf; returns the steps
  // already done.
  std::int64_t restore() {
    const auto& c = spec.checkpoint;
    if (!c.dir.empty() && c.resume == config::Resume::Auto) {
      if (const auto latest = ckpt::latest_checkpoint(c.dir)) {
        ckpt::LoadedCheckpoint loaded = ckpt::open_checkpoint(*latest);
        const auto mismatches = ckpt::model_mismatches(loaded.job_meta(), spec.model);
        if (!mismatches.empty())
          throw ckpt::CheckpointError(loaded.path(), "was written for another model: " + mismatches.front());
        const ckpt::MomentBuffers m = moments();
        ckpt::restore_param_store(loaded, params, &m);
        const std::int64_t step = loaded.state().at("step").get<std::int64_t>();
        log.note("resumed from " + loaded.path() + " at step " + std::to_string(step));
        return step;
      }
    }
    if (!c.load_hf.empty()) {
      const auto imported = ckpt::import_hf(c.load_hf, spec.model, params);
      log.note("initialised from HF weights in " + c.load_hf + " (" + std::to_string(imported.tensors) + " tensors)");
    }
    return 0;
  }

  // Writes step `step` (steps done) to checkpoint.dir, atomically.
  void save(std::int64_t step) {
    if (spec.checkpoint.dir.empty() || step == last_saved_step) return;
    last_saved_step = step;
    const nlohmann::json state = {{"step", step},
                                  {"consumed_samples", train_loader.consumed_samples(step)},
                                  {"seed", spec.train.seed},
                                  {"lr_step", step}};
    const ckpt::MomentBuffers m = moments();
    const std::string path = ckpt::save_checkpoint(spec.checkpoint.dir, step, ckpt::job_meta(spec), state,
                                                   ckpt::param_store_shards(params, &m), spec.checkpoint.keep);
    log.note("checkpoint saved: " + path);
  }

  double memory_bytes() const {
    return static_cast<double>(params.numel()) * 4.0 * 4.0  // params, grads, exp_avg, exp_avg_sq
           + static_cast<double>(model.activation_bytes());
  }

  // One optimizer step; returns the mean loss over the global batch's tokens.
  double train_step(std::int64_t step, double lr, double& grad_norm) {
    params.zero_grads();
    const int micro = train_loader.microbatches();
    const double tokens_per_step = static_cast<double>(spec.train.global_batch) * spec.model.seq_len;
    const float grad_scale = static_cast<float>(1.0 / tokens_per_step);
    double loss_sum = 0;
    for (int mb = 0; mb < micro; ++mb) {
      train_loader.load_microbatch(step, mb, inputs.data(), targets.data());
      loss_sum += model.forward(0, inputs.data(), targets.data(), grad_scale).sum;
      model.backward(0);
    }
    grad_norm = optimizer.grad_norm();
    if (std::isfinite(grad_norm)) {
      optimizer.clip(grad_norm, spec.train.grad_clip);
      optimizer.step(lr, step + 1);
    }
    return loss_sum / tokens_per_step;
  }

  double validation_loss() {
    double sum = 0;
    std::int64_t count = 0;
    for (int b = 0; b < eval_loader->num_batches(); ++b) {
      for (int mb = 0; mb < eval_loader->microbatches(); ++mb) {
        eval_loader->load_microbatch(b, mb, inputs.data(), targets.data());
        const auto r = model.evaluate(0, inputs.data(), targets.data());
        sum += r.sum;
        count += r.tokens;
      }
    }
    return count > 0 ? sum / static_cast<double>(count) : 0.0;
  }
};

Trainer::Trainer(const config::JobSpec& spec, const kernels::Ops& ops, TrainerOptions options)
    : state_(std::make_unique<State>(spec, ops, options)) {}

Trainer::~Trainer() = default;

RunResult Trainer::run() {
  State& s = *state_;
  const config::JobSpec& spec = s.spec;
  RunResult result;
  result.steps_done = s.start_step;
  const double tokens_per_step = static_cast<double>(spec.train.global_batch) * spec.model.seq_len;
  double seconds_total = 0;
  std::int64_t timed_steps = 0;
  for (std::int64_t step = s.start_step; step < spec.train.steps; ++step) {
    const bool stop_after = s.options.stop_after_steps > 0 && step - s.start_step >= s.options.stop_after_steps;
    if (stop_after || (s.options.stop_requested != nullptr && s.options.stop_requested->load())) {
      result.status = RunStatus::Interrupted;
      s.log.note("stop requested: checkpointing after step " + std::to_string(step));
      s.save(step);
      return result;
    }
    const auto t0 = Clock::now();
    const double lr = optim::learning_rate(spec.optimizer, spec.train.steps, step);
    double grad_norm = 0;
    const double loss = s.train_step(step, lr, grad_norm);
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      result.status = RunStatus::NonFinite;
      result.failed_step = step + 1;
      s.log.note("non-finite " + std::string(std::isfinite(loss) ? "gradient norm" : "loss") + " at step " +
                 std::to_string(step + 1) + ": stopping");
      break;
    }
    const double seconds = seconds_since(t0);
    seconds_total += seconds;
    timed_steps += 1;

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_seconds = seconds;
    m.tokens_per_s = tokens_per_step / seconds;
    m.mfu = s.peak_flops > 0 ? s.flops_per_step / (seconds * s.peak_flops) : 0.0;
    m.memory_bytes = s.memory_bytes();
    if (s.eval_loader && (m.step % spec.data.eval_every == 0 || m.step == spec.train.steps))
      m.val_loss = s.validation_loss();
    s.log.record(m, static_cast<double>(spec.train.steps - m.step) * seconds_total / static_cast<double>(timed_steps));
    result.steps_done = m.step;
    result.final_loss = loss;
    if (spec.checkpoint.every > 0 && m.step % spec.checkpoint.every == 0 && m.step != spec.train.steps) s.save(m.step);
  }
  if (result.status == RunStatus::Completed && result.steps_done > s.start_step) s.save(result.steps_done);
  return result;
}

}  // namespace ptrain::train
