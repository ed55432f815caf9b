#include "engine/train/trainer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/fp8_history_checkpoint.h"
#include "engine/ckpt/hf.h"
#include "engine/ckpt/param_checkpoint.h"
#include "engine/data/datasets.h"
#include "engine/comm/parallel_groups.h"
#include "engine/model/param_store.h"
#include "engine/optim/lr_schedule.h"
#include "engine/zero/data_parallel.h"
#include "engine/parallel/expert_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/plan/flops.h"
#include "engine/plan/hardware.h"
#include "engine/runtime/device_interval.h"
#include "engine/runtime/device_scalars.h"
#include "engine/train/axis_accounting.h"
#include "engine/train/checkpoint_claim.h"
#include "engine/train/engine_limits.h"
#include "engine/train/evaluation.h"
#include "engine/train/grad_norm.h"
#include "engine/train/shard_mirror.h"
#include "engine/train/metrics.h"
#include "engine/train/pipeline_stage.h"
#include "engine/train/run_trace.h"

namespace ptrain::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// This rank's groups, after refusing what this build's engine does not execute yet.
dist::ParallelGroups step_groups(const config::JobSpec& spec, dist::Comm& comm) {
  const std::vector<EngineLimit> limits = engine_limits(spec);
  if (!limits.empty())
    throw std::invalid_argument(limits.front().key + ": " + limits.front().message +
                                " (fix: " + limits.front().fix + ")");
  const std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
  const bool tied = std::any_of(registry.begin(), registry.end(), [](const model::ParamInfo& i) { return i.tied_head; });
  return dist::make_parallel_groups(spec, comm, tied);
}

}  // namespace

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
  PerAxis sent_before;  // sent_so_far() at the previous step's report, plus evaluations' traffic since
  PerAxis spent_before;  // spent_so_far() alike
  std::unique_ptr<dist::Trace> trace;  // logging.trace: what this rank ran, when

  State(const config::JobSpec& s, const kernels::Ops& backend, dist::Comm& c, TrainerOptions opts)
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
        loss_sums(backend, Evaluation::kBatches * train_loader.microbatches()) {  // evaluation batches slice alike
    if (valid_source && s.data.eval_every > 0)  // its tokens checked before the first step
      evaluation = std::make_unique<Evaluation>(s, *valid_source, groups.dp_rank, pipeline, c, holds_loss());
    if (leader) log = std::make_unique<MetricsLog>(s.logging.metrics, s.logging.tensorboard, s.train.steps, s.logging.every);
    if (dir_lock)
      for (const std::string& w : dir_lock->warnings()) note("warning: " + w);
    pipeline.set_hooks(&zero);
    if (s.train.precision == config::Precision::Fp8 && s.train.fp8.scaling == config::Fp8Scaling::Delayed) {
      fp8_history = std::make_unique<model::Fp8History>(backend, s.model.layers, s.train.fp8.amax_history);
      pipeline.set_fp8_history(fp8_history.get());
    }
    const auto weights_begin = Clock::now();
    options.startup.allocation_s = std::chrono::duration<double>(weights_begin - constructed).count();
    start_step = restore();
    start_run_records(s, c, log.get(), start_step, options.segment);  // or refuses another run's records
    options.startup.weights_s = seconds_since(weights_begin);
    last_saved_step = start_step;
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
  ~State() { comm.set_trace(nullptr); }  // the Comm outlives the trainer

  RunResult run() {  // Trainer::run: the steps, then the trace
    RunResult result = run_steps();
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
  RunResult run_steps();

  // How the ParamStore is laid out for ZeRO over the dp-cp group (and the experts over expert-dp).
  model::StoreOptions store_options(const kernels::Ops& memory) const {
    return parallel::zero_store_options(spec, dp_group.size(), memory,
                                     groups.expert_dp != nullptr ? groups.expert_dp->size() : 0);
  }

  void note(const std::string& line) const {
    if (log) log->note(line);
  }

  // Resumes from checkpoint.dir (resume: auto) or imports checkpoint.load_hf, else initialises from
  // the seed; returns the steps already done. Every rank reads what it holds.
  std::int64_t restore() {
    const auto& c = spec.checkpoint;
    if (!c.dir.empty() && c.resume == config::Resume::Auto) {
      // Rank 0 finds the step and every rank reads it: ranks looking for themselves could find others
      // (a relative checkpoint.dir in another working directory) and train on mismatched.
      std::string latest;
      if (comm.rank() == 0) {
        std::vector<std::string> warnings;  // step directories passed over: an older step is no secret
        if (const auto found = ckpt::latest_checkpoint(c.dir, &warnings))
          latest = std::filesystem::absolute(*found).string();
        for (const std::string& w : warnings) note("warning: " + w);
      }
      comm.broadcast_string(comm.world_group(), latest, 0);
      if (!latest.empty()) {
        // The checkpoint wins over load_hf, which must still name an export of this model: a wrong
        // path is bad input on resume as on a fresh start, not a surprise once the checkpoints go.
        if (!c.load_hf.empty()) ckpt::check_hf(c.load_hf, spec.model);
        ckpt::LoadedCheckpoint loaded(latest);
        for (const std::string& w : loaded.warnings()) note("warning: " + w);
        const auto mismatches = ckpt::model_mismatches(loaded.job_meta(), spec.model);
        if (!mismatches.empty())
          throw ckpt::CheckpointError(loaded.path(), "was written for another model: " + mismatches.front());
        for (const std::string& line : ckpt::resume_messages(loaded.job_meta(), spec)) note(line);
        const std::int64_t step = loaded.step();  // checked on open: the directory's, and state.step's
        // The data goes on from the samples taken, whatever global_batch took them.
        train_loader.resume_at(step, loaded.consumed_samples());
        options.startup.weights = "read from a checkpoint";
        ShardMirror staged(zero.shard_memory(), zero.restored_shards());
        ckpt::restore_flat_shards(loaded, params, staged.host());
        if (fp8_history)
          for (const std::string& line : ckpt::restore_fp8_history(loaded, *fp8_history)) note(line);
        staged.upload();
        zero.after_restore();
        note("resumed from " + loaded.path() + " at step " + std::to_string(step));
        if (!c.load_hf.empty())
          note("note: checkpoint.load_hf (" + c.load_hf + ") is not read: the checkpoint wins over it");
        if (step >= spec.train.steps)
          note("nothing to train: the checkpoint's step " + std::to_string(step) + " >= train.steps " +
               std::to_string(spec.train.steps) + " (raise train.steps to train on)");
        return step;
      }
    }
    if (c.load_hf.empty()) {
      zero.initialize(spec.train.seed, spec.model.layers);
      return 0;
    }
    options.startup.weights = "read from HF weights";
    const auto imported = import_hf_weights(c.load_hf);
    for (const std::string& w : imported.warnings) note("warning: " + w);
    note("initialised from HF weights in " + c.load_hf + " (" + std::to_string(imported.tensors) + " tensors)");
    return 0;
  }

  // HF weights into the model: read into a full fp32 host copy of the flat layout (initialised from
  // the seed first, for anything the files do not hold), of which each rank keeps its part.
  ckpt::HfImportResult import_hf_weights(const std::string& dir) {
    model::StoreOptions host_options = store_options(kernels::cpu_ops());
    host_options.own_params = true;
    host_options.own_grads = false;
    host_options.param_dtype = kernels::DType::F32;
    model::ParamStore host(params.registry(), params.coords(), host_options);
    host.initialize(spec.train.seed, spec.model.layers);
    const ckpt::HfImportResult result = ckpt::import_hf(dir, spec.model, host);
    zero.assign_weights(host.params());
    return result;
  }

  // Writes step `step` (steps done) to checkpoint.dir: every rank its shards, rank 0 the manifest;
  // the step counts only once rank 0 has renamed it into place. A failure on any rank (a full disk)
  // fails the save on every rank, exit 1, and leaves the previous checkpoint current: a failed write
  // removes its own file; every rank reports to rank 0 whether its write succeeded, so that rank 0
  // removes the temporary directory only once no rank writes into it any more; then rank 0 tells
  // every rank how the save ended. (A rank that dies instead fails rank 0's gather, and rank 0
  // removes the directory then; whatever a late writer leaves, the next claim of the directory
  // removes.) Only rank 0 removes it: a rank failing after the gather must not delete files rank 0
  // may be committing.
  void save(std::int64_t step) {
    if (spec.checkpoint.dir.empty() || step == last_saved_step) return;
    stop_agreed(step);  // throws on every rank once rank 0 has lost a record: nothing saved after it
    last_saved_step = step;
    const dist::Trace::Scope span(trace.get(), "checkpoint step " + std::to_string(step), "checkpoint");
    const dist::Group& world = comm.world_group();
    // Absolute: every rank writes where rank 0 made it, whatever its own working directory.
    std::string tmp_dir =
        leader ? std::filesystem::absolute(ckpt::begin_checkpoint(spec.checkpoint.dir, step)).string() : std::string();
    comm.broadcast_string(world, tmp_dir, 0);
    std::exception_ptr failure;  // this rank's own
    std::string report;          // to rank 0: what this rank wrote (RankFileInfo JSON), or why nothing
    try {
      ShardMirror staged(zero.shard_memory(), zero.saved_shards());
      staged.download();
      std::vector<ckpt::TensorShard> shards = ckpt::flat_shard_tensors(params, staged.host());
      if (fp8_history && leader) shards.push_back(ckpt::fp8_history_shard(*fp8_history));
      report = ckpt::to_json(ckpt::write_rank_file(tmp_dir, comm.rank(), step, shards)).dump();
    } catch (const std::exception& e) {
      failure = std::current_exception();
      report = kSaveFailed + ("rank " + std::to_string(comm.rank()) + ": " + e.what());
    }
    std::string outcome;  // from rank 0: empty once the step is committed, else why it is not
    try {
      const std::vector<std::string> reports = comm.gather_strings(world, report, 0);
      if (leader) outcome = commit_or_abandon(step, tmp_dir, reports, failure);
    } catch (...) {
      if (leader) ckpt::abandon_checkpoint(tmp_dir);
      throw;
    }
    comm.broadcast_string(world, outcome, 0);
    if (failure) std::rethrow_exception(failure);
    if (!outcome.empty()) throw std::runtime_error("checkpoint step " + std::to_string(step) + " not saved: " + outcome);
  }

  static constexpr const char* kSaveFailed = "failed: ";  // a save report without a rank file

  // Rank 0: commits the step that every rank's report describes, or abandons it when a rank failed
  // (or the commit does: then `failure` is set); returns "" or why the step was not saved.
  std::string commit_or_abandon(std::int64_t step, const std::string& tmp_dir, const std::vector<std::string>& reports,
                                std::exception_ptr& failure) {
    const std::string failed = kSaveFailed;
    for (const std::string& r : reports) {
      if (r.compare(0, failed.size(), failed) != 0) continue;
      ckpt::abandon_checkpoint(tmp_dir);
      return r.substr(failed.size());
    }
    try {
      std::vector<ckpt::RankFileInfo> ranks;
      for (const std::string& text : reports) ranks.push_back(ckpt::rank_file_info_from_json(nlohmann::json::parse(text)));
      // Every parameter and its moments in some rank's file: a rank that wrongly took its chunk for
      // another's copy would otherwise lose it with the run exiting 0 (commit_checkpoint checks the
      // elements of what is there).
      std::set<std::string> saved;
      for (const ckpt::RankFileInfo& rank : ranks)
        for (const ckpt::RankFileInfo::Piece& piece : rank.pieces) saved.insert(piece.tensor);
      for (const model::ParamInfo& info : model::build_registry(spec.model))
        for (const std::string& name : {ckpt::model_tensor_name(info.name), ckpt::exp_avg_tensor_name(info.name),
                                        ckpt::exp_avg_sq_tensor_name(info.name)})
          if (saved.count(name) == 0) throw std::logic_error("no rank wrote " + name + " (an engine defect)");
      const nlohmann::json state = {{"step", step},
                                    {"consumed_samples", train_loader.consumed_samples(step)},
                                    {"seed", spec.train.seed},
                                    {"lr_step", step}};
      const std::string path = ckpt::commit_checkpoint(spec.checkpoint.dir, tmp_dir, step, ckpt::job_meta(spec), state,
                                                       ranks, spec.checkpoint.keep);
      note("checkpoint saved: " + path);
      return "";
    } catch (const std::exception& e) {
      ckpt::abandon_checkpoint(tmp_dir);
      failure = std::current_exception();
      return std::string("rank 0: ") + e.what();
    }
  }

  double memory_bytes() const {
    const parallel::ZeroBytes z = zero.allocated_bytes();
    return z.params + z.grads + z.optimizer + z.windows + static_cast<double>(pipeline.activation_bytes()) +
           (fp8_history ? static_cast<double>(fp8_history->device_bytes()) : 0.0);
  }

  struct StepOutcome {
    double loss = 0;  // the mean over the global batch's tokens
    double grad_norm = 0;
    std::optional<double> pipeline_idle;  // pp > 1: the largest share of the pipeline a rank waited
    std::optional<PerAxis> comm_bytes;    // world > 1: what each axis sent, the most over the ranks
    std::optional<PerAxis> comm_seconds;  // world > 1: the seconds inside each axis's calls (under
                                          // NCCL the compute stream's waits on them), alike
    double optimizer_seconds = 0;         // the slowest rank's
    double compute_seconds = 0;           // the busiest rank's pipeline phase outside its calls (on
                                          // CUDA the device's time less its waits, not the host's issuing)
    bool stop = false;  // every rank agreed to stop after this step
  };

  // One optimizer step (`step` steps done before it).
  StepOutcome train_step(std::int64_t step, double lr) {
    StepOutcome out;
    const int micro = train_loader.microbatches();
    zero.begin_step(micro);
    const double tokens_per_step = static_cast<double>(spec.train.global_batch) * spec.model.seq_len;
    const float grad_scale = static_cast<float>(1.0 / tokens_per_step);
    const PerAxis spent_at_start = comm.world() > 1 ? spent_so_far() : PerAxis{};
    const auto t0 = Clock::now();
    runtime::DeviceInterval on_device(ops);
    const std::uint64_t waits_from = comm.device_wait_mark();
    const double waited =
        pipeline.train([&](int mb, std::int32_t* tokens,
                           std::int32_t* labels) { train_loader.load_microbatch(step, mb, tokens, labels); },
                       grad_scale, loss_sums, zero);
    on_device.end();
    const double pipeline_seconds = seconds_since(t0);
    // The gradients' last reductions (and the tied embedding's sum) belong to the measured phase:
    // what they leave exposed is the dp time validate predicts. The norm below would finish them anyway.
    runtime::DeviceInterval reducing(ops);
    zero.finish_reductions();
    reducing.end();
    const std::uint64_t waits_to = comm.device_wait_mark();
    const double phase_seconds = seconds_since(t0);
    const PerAxis spent_in_pipeline = comm.world() > 1 ? spent_so_far() - spent_at_start : PerAxis{};
    out.grad_norm = global_norm.compute();  // waits for the device: the losses are there now too
    if (fp8_history) {  // a skipped update's amaxes are not history (the norm is every rank's)
      if (std::isfinite(out.grad_norm))
        fp8_history->end_step([&](float* v, std::int64_t n) {
          comm.all_reduce(comm.world_group(), v, static_cast<std::size_t>(n), dist::ReduceOp::Max);
        });
      else
        fp8_history->discard_step();
    }
    if (comm.world() > 1) {  // the most over the ranks: pipeline idle, each axis's bytes and seconds
      const PerAxis sent = sent_so_far(), bytes = sent - sent_before;
      const PerAxis spent = spent_so_far(), seconds = spent - spent_before;
      // This rank's compute: its pipeline phase outside the calls it made in it. Where the compute
      // stream waits for collectives and messages (NCCL), the host only issued them: then the
      // device's pipeline phase less the compute stream's waits in it, and each axis's time is its
      // waits (the norm above waited for the device, so settling them waits for nothing).
      const PerAxis& in = spent_in_pipeline;
      double computed = phase_seconds - (in.tp + in.pp + in.dp + in.cp + in.ep);
      double idle = pipeline_seconds > 0 ? waited / pipeline_seconds : 0.0;
      PerAxis axis_seconds = seconds;
      const std::optional<double> device_seconds = on_device.seconds(), device_reducing = reducing.seconds();
      const auto waits = comm.settle_device_waits(waits_to);
      const bool timed_on_device = waits && device_seconds && device_reducing;
      if (timed_on_device) {
        axis_seconds = device_waits(*waits, waits_from, groups);
        const PerAxis& w = axis_seconds;
        computed = *device_seconds + *device_reducing - (w.tp + w.pp + w.dp + w.cp + w.ep);
        dist::ParallelGroups stages;  // the pipeline's messages alone, not the tied embedding's sum
        stages.pp = groups.pp;
        idle = *device_seconds > 0 ? device_waits(*waits, waits_from, stages).pp / *device_seconds : 0.0;
      }
      double most[12] = {idle,
                         bytes.tp, bytes.pp, bytes.dp, bytes.cp, bytes.ep,
                         axis_seconds.tp, axis_seconds.pp, axis_seconds.dp, axis_seconds.cp, axis_seconds.ep,
                         std::max(0.0, computed)};
      sent_before = sent;
      spent_before = spent;
      comm.all_reduce(comm.world_group(), most, 12, dist::ReduceOp::Max);
      if (groups.pp != nullptr && (pipeline.messages_wait_on_host() || timed_on_device)) out.pipeline_idle = most[0];
      out.comm_bytes = PerAxis{most[1], most[2], most[3], most[4], most[5]};
      out.comm_seconds = PerAxis{most[6], most[7], most[8], most[9], most[10]};
      out.compute_seconds = most[11];
    } else {
      // The pipeline phase as the device ran it (CUDA), else as the host did. Not with peers: their
      // compute stream also waits on messages (NCCL) the host's clock does not see, so the device's
      // span less the host's seconds in calls would count those waits as compute.
      out.compute_seconds = on_device.seconds().value_or(pipeline_seconds);
    }
    double loss_sum = holds_loss() ? loss_sums.read_sum(micro) : 0.0;
    comm.all_reduce(comm.world_group(), &loss_sum, 1);
    out.loss = loss_sum / tokens_per_step;
    // Agreed while the host waits anyway: after the update a host collective would wait (on NCCL)
    // behind the parameter gathers that the next forward overlaps.
    out.stop = stop_agreed(step + 1);
    if (trace) trace->resolve_device();  // the device is past this step's pipeline (the norm waited)
    if (std::isfinite(out.grad_norm)) {
      const auto update = Clock::now();
      const dist::Trace::Scope span(trace.get(), "optimizer", "optimizer");
      const std::uint64_t from = trace ? trace->mark() : 0;
      zero.step(lr, step + 1, GradNorm::clip_factor(out.grad_norm, spec.train.grad_clip));
      if (trace) trace->add_device("optimizer", "optimizer", from, trace->mark());
      out.optimizer_seconds = seconds_since(update);  // this rank's; the next report takes the most
    }
    return out;
  }

  // What this rank has sent on each axis's groups since the start (dp: ZeRO's, the experts' too).
  PerAxis sent_so_far() const { return bytes_sent(comm, groups); }
  // The seconds this rank has spent inside each axis's calls since the start.
  PerAxis spent_so_far() const { return seconds_in_calls(comm, groups); }

  // Whether this rank's losses count in the world's sum: those of the last stage's ranks, of tp rank 0
  // only (every tp rank computes the same).
  bool holds_loss() const { return pipeline.computes_loss() && groups.tp_rank == 0; }

  double validation_loss(const Evaluation::Batches& batches) {
    const dist::Trace::Scope span(trace.get(), "validation", "validation");
    zero.publish_update();  // the step's traffic, counted in the next step's
    const PerAxis before = sent_so_far(), spent = spent_so_far();
    const double loss = evaluation->loss(batches, loss_sums);
    if (fp8_history) fp8_history->discard_step();  // what the evaluation's casts recorded
    // The evaluation's traffic is no step's: the next step's report leaves it out.
    sent_before += sent_so_far() - before;
    spent_before += spent_so_far() - spent;
    return loss;
  }

  // Whether any rank wants to stop once `steps_done` steps are done (all ranks must stop at the
  // same step boundary). Once rank 0 has lost a record (a full disk) every rank throws instead, exit
  // 1: save() and run() ask too, so that no checkpoint is committed after the loss.
  bool stop_agreed(std::int64_t steps_done) {
    const bool after = options.stop_after_steps > 0 && steps_done - start_step >= options.stop_after_steps;
    std::int64_t stop = after || (options.stop_requested != nullptr && options.stop_requested->load()) ? 1 : 0;
    if (log && log->failure()) stop = 2;
    comm.all_reduce(comm.world_group(), &stop, 1, dist::ReduceOp::Max);
    if (stop == 2) throw records_lost_error(log.get(), spec.checkpoint.dir, last_saved_step, steps_done);
    return stop != 0;
  }

  void inject_fault(std::int64_t next_step) const {
    if (options.fault_rank != comm.rank() || options.fault_step != next_step) return;
    std::fprintf(stderr, "debug fault: rank %d runs '%s' before step %lld\n", comm.rank(),
                 options.fault_action.c_str(), static_cast<long long>(next_step));
    std::fflush(stderr);
    if (options.fault_action == "kill") ::kill(::getpid(), SIGKILL);
    if (options.fault_action == "exit") std::_Exit(3);
    if (options.fault_action == "stall")
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
};

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
        std::fprintf(stderr, "rank %d: its trace so far written to %s\n", state_->comm.rank(), path.c_str());
    }
    throw;
  }
}

RunResult Trainer::State::run_steps() {
  RunResult result;
  result.steps_done = start_step;
  const double tokens_per_step = static_cast<double>(spec.train.global_batch) * spec.model.seq_len;
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
    inject_fault(step + 1);
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
    m.tokens_per_s = tokens_per_step / seconds;
    m.mfu = peak_flops > 0 ? flops_per_step / (seconds * peak_flops) : 0.0;
    m.memory_bytes = memory_bytes();
    m.pipeline_idle = outcome.pipeline_idle;
    m.comm_bytes = outcome.comm_bytes;
    m.comm_seconds = outcome.comm_seconds;
    m.optimizer_seconds = outcome.optimizer_seconds;
    m.compute_seconds = outcome.compute_seconds;
    if (const auto in_use = ops.device_bytes_in_use()) {
      device_peak = std::max(device_peak, static_cast<double>(*in_use));
      m.device_memory_peak_bytes = device_peak;
    }
    const double eta = static_cast<double>(spec.train.steps - m.step) * seconds_total / static_cast<double>(timed_steps);
    if (evaluation && (m.step % spec.data.eval_every == 0 || m.step == spec.train.steps)) {
      Evaluation::Batches batches;
      if (const std::exception_ptr unreadable = evaluation->read(batches)) {
        if (log) log->record(m, eta);  // the step is trained: recorded and saved before its data ends the run
        save(m.step);
        std::rethrow_exception(unreadable);
      }
      m.val_loss = validation_loss(batches);
    }
    if (log) log->record(m, eta);
    record.add(m);
    result.steps_done = m.step;
    result.final_loss = loss;
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
