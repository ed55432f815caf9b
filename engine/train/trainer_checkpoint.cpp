// Trainer::State's checkpoints: restore (resume, HF import or the seed) and the cross-rank save
// protocol (every rank writes its shards, in the background with checkpoint.async; rank 0 commits).
#include <filesystem>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/fp8_history_checkpoint.h"
#include "engine/ckpt/param_checkpoint.h"
#include "engine/log/log.h"
#include "engine/train/shard_mirror.h"
#include "engine/train/trainer_state.h"

namespace ptrain::train {

// Resumes from checkpoint.dir (resume: auto) or imports checkpoint.load_hf, else initialises from
// the seed; returns the steps already done. Every rank reads what it holds.
std::int64_t Trainer::State::restore() {
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
ckpt::HfImportResult Trainer::State::import_hf_weights(const std::string& dir) {
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
// the step counts only once rank 0 has renamed it into place. With checkpoint.async the shards are
// copied to host memory here and written on the background save's thread while training goes on;
// the rest of the protocol (finish_save) runs once every rank has written its file: at the first
// stop_agreed that finds none still writing (each step asks), before the next save, or at the end.
// A failure on any rank (a full disk) fails the save on every rank, exit 1, and leaves the previous
// checkpoint current: a failed write removes its own file; every rank reports to rank 0 whether its
// write succeeded, so that rank 0 removes the temporary directory only once no rank writes into it
// any more; then rank 0 tells every rank how the save ended. (A rank that dies instead fails rank
// 0's gather, and rank 0 removes the directory then; whatever a late writer leaves, the next claim
// of the directory removes.) Only rank 0 removes it: a rank failing after the gather must not delete
// files rank 0 may be committing.
void Trainer::State::save(std::int64_t step) {
  if (spec.checkpoint.dir.empty() || step == last_saved_step) return;
  if (background && background->in_flight() && background->step() == step) return;  // being written
  if (background && background->in_flight())  // at most one save in flight
    wait_for_background_write("checkpoint step " + std::to_string(step));
  stop_agreed(step);  // throws on every rank once rank 0 has lost a record: nothing saved after it;
                      // finishes the save in flight, which every rank has written now
  const dist::Trace::Scope span(trace.get(), "checkpoint step " + std::to_string(step), "checkpoint");
  if (background) background->wait();  // its pruning removes leftovers, which this save's directory must not be
  const dist::Group& world = comm.world_group();
  BackgroundSave::Pending pending;
  pending.step = step;
  pending.state = checkpoint_state(step);
  // Absolute: every rank writes where rank 0 made it, whatever its own working directory.
  pending.tmp_dir =
      leader ? std::filesystem::absolute(ckpt::begin_checkpoint(spec.checkpoint.dir, step)).string() : std::string();
  comm.broadcast_string(world, pending.tmp_dir, 0);
  const model::Fp8History* history = leader ? fp8_history.get() : nullptr;
  if (background) {
    std::vector<ckpt::TensorShard> tensors;
    try {
      tensors = background->copy(params, zero.saved_shards(), history);
    } catch (const std::exception& e) {  // no memory for the copy: reported as a failed write, when all are
      pending.failure = std::current_exception();
      pending.report = failed_report(comm.rank(), e);
    }
    return background->start(std::move(pending), comm.rank(), std::move(tensors));
  }
  try {
    ShardMirror staged(zero.shard_memory(), zero.saved_shards());
    staged.download();
    std::vector<ckpt::TensorShard> shards = ckpt::flat_shard_tensors(params, staged.host());
    if (history != nullptr) shards.push_back(ckpt::fp8_history_shard(*history));
    pending.report = write_rank_report(pending.tmp_dir, comm.rank(), step, shards, pending.failure);
  } catch (const std::exception& e) {
    pending.failure = std::current_exception();
    pending.report = failed_report(comm.rank(), e);
  }
  finish_save(std::move(pending));
}

// checkpoint.async: waits for this rank's background write, saying how long where it had to wait
// (`before`: what waits, "checkpoint step 20", "the end of the run").
void Trainer::State::wait_for_background_write(const std::string& before) {
  const std::int64_t step = background->step();
  const dist::Trace::Scope span(trace.get(), "checkpoint step " + std::to_string(step) + ": waiting for the write",
                                "checkpoint");
  const double waited = background->wait();
  if (waited >= 0.001)
    ::ptrain::log::ckpt().info("{} waited {:.3f} s for checkpoint step {} to be written (at most one save in flight)",
                               before, waited, step);
}

// Waits for a background save in flight and finishes it on every rank (all call it at the same
// point: at the end of the run, before an error ends it).
void Trainer::State::settle_save(std::int64_t steps_done, const std::string& before) {
  if (!background || !background->in_flight()) return;
  wait_for_background_write(before);
  stop_agreed(steps_done);  // no rank is writing now: this finishes the save
}

// The rest of a save once every rank has written its file (or failed to): rank 0 gathers every
// rank's report and commits the step, or abandons it; every rank learns how it ended.
void Trainer::State::finish_save(BackgroundSave::Pending done) {
  const dist::Group& world = comm.world_group();
  const dist::Trace::Scope span(trace.get(), "checkpoint step " + std::to_string(done.step) + ": commit", "checkpoint");
  std::string outcome;  // from rank 0: empty once the step is committed, else why it is not
  try {
    const std::vector<std::string> reports = comm.gather_strings(world, done.report, 0);
    if (leader) outcome = commit_or_abandon(done, reports);
  } catch (...) {
    if (leader) ckpt::abandon_checkpoint(done.tmp_dir);
    throw;
  }
  comm.broadcast_string(world, outcome, 0);
  if (done.failure) std::rethrow_exception(done.failure);
  if (!outcome.empty())
    throw std::runtime_error("checkpoint step " + std::to_string(done.step) + " not saved: " + outcome);
  last_saved_step = done.step;
}

// What the manifest records of the trainer at step `step`: where the data and the schedule go on.
nlohmann::json Trainer::State::checkpoint_state(std::int64_t step) const {
  return {{"step", step},
          {"consumed_samples", train_loader.consumed_samples(step)},
          {"seed", spec.train.seed},
          {"lr_step", step}};
}

// Rank 0: commits the step that every rank's report describes, or abandons it when a rank failed
// (or the commit does: then done.failure is set); returns "" or why the step was not saved.
std::string Trainer::State::commit_or_abandon(BackgroundSave::Pending& done, const std::vector<std::string>& reports) {
  const std::string failed = kSaveFailed;
  for (const std::string& r : reports) {
    if (r.compare(0, failed.size(), failed) != 0) continue;
    ckpt::abandon_checkpoint(done.tmp_dir);
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
    const std::string path =
        ckpt::commit_checkpoint(spec.checkpoint.dir, done.tmp_dir, done.step, ckpt::job_meta(spec), done.state, ranks);
    note("checkpoint saved: " + path);
    if (background)  // removing older steps (a second a few GB) is the writer's, not the step's
      background->after_commit([dir = spec.checkpoint.dir, step = done.step, keep = spec.checkpoint.keep] {
        ckpt::prune_checkpoints(dir, step, keep);
      });
    else
      ckpt::prune_checkpoints(spec.checkpoint.dir, done.step, spec.checkpoint.keep);
    return "";
  } catch (const std::exception& e) {
    ckpt::abandon_checkpoint(done.tmp_dir);
    done.failure = std::current_exception();
    return std::string("rank 0: ") + e.what();
  }
}

}  // namespace ptrain::train
