// `ptrain convert job.yaml (--from CKPT | --from-hf DIR | --init) (--to-hf DIR | --to DIR)`:
// HF safetensors <-> ptrain checkpoint, for the job's model. The whole model is held in one process
// (tp = pp = ep = 1), whatever layout the job trains with; checkpoints of any layout are read.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/job_loading.h"
#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/dir_lock.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/hf.h"
#include "engine/ckpt/param_checkpoint.h"
#include "engine/model/param_registry.h"
#include "engine/model/param_store.h"

namespace ptrain::app {
namespace {

struct ConvertArgs {
  JobArgs job;
  std::string from;     // a step directory, or a checkpoint directory (its latest step)
  std::string from_hf;  // an HF model directory
  bool init = false;    // a freshly initialised model (train.seed)
  std::string to_hf;    // write model.safetensors + config.json here
  std::string to;       // write a step_<N> checkpoint into this checkpoint directory
  bool force = false;   // replace a model.safetensors already in to_hf (or one that appears there meanwhile)
};

int bad_input(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return kExitBadInput;
}

// --to writes step_0 and points `latest` at it: in a directory of training checkpoints the job's
// next resume would start over from the converted weights and, saving on, prune the real ones.
// Refused (exit 2) where `dir` holds any step directory or a `latest`; nothing there is touched.
std::optional<std::string> holds_checkpoints(const std::string& dir) {
  const std::string found = ckpt::held_checkpoints(dir);
  if (found.empty()) return std::nullopt;
  return dir + " already holds checkpoints (" + found + "): convert --to writes step_0 and points `latest` at it, "
         "so a job resuming from " + dir + " would start over from the converted weights (fix: give --to an empty "
         "or new directory)";
}

// The whole model, on one rank. Allocated only once the source is known to fit the job: a job of
// 8B parameters asked to read a GPT-2 export was a bad_alloc (exit 1) before it was a mismatch.
model::ParamStore whole_model(const config::JobSpec& spec) {
  std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
  try {
    return model::ParamStore(std::move(registry), model::ShardCoords{});
  } catch (const std::bad_alloc&) {
    double bytes = 0;
    for (const model::ParamInfo& info : model::build_registry(spec.model)) bytes += 4.0 * static_cast<double>(info.numel());
    char text[192];
    std::snprintf(text, sizeof text, "cannot allocate the whole model (%.1f GB of fp32 weights): convert holds it in "
                  "one process; run it where that much memory is free", bytes / 1e9);
    throw std::runtime_error(text);
  }
}

// --to while the convert writes it: held with the checkpoint directory lock, as a job holds
// checkpoint.dir. What the convert made to hold it (the directory and the folders above it that were
// not there, the lock file where none was) is removed again unless the convert succeeds: a failed
// convert leaves nothing behind. (An existing lock file stays: a job may hold it open.)
class ConvertTarget {
 public:
  explicit ConvertTarget(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path path = fs::path(dir).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "out/" names "out"
    for (fs::path p = path; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path())
      made_.push_back(p.string());  // innermost first
    lock_file_ = ckpt::join_path(dir, ckpt::CheckpointDirLock::kFileName);
    lock_file_made_ = !fs::exists(fs::symlink_status(lock_file_, ec));
    try {
      lock_.emplace(dir);
    } catch (...) {
      discard();
      throw;
    }
  }
  ~ConvertTarget() {
    if (!kept_) discard();
  }
  ConvertTarget(const ConvertTarget&) = delete;
  ConvertTarget& operator=(const ConvertTarget&) = delete;

  const ckpt::CheckpointDirLock& lock() const { return *lock_; }
  void keep() { kept_ = true; }  // the convert wrote its checkpoint

 private:
  void discard() {
    lock_.reset();  // released before its file goes
    if (lock_file_made_) ::unlink(lock_file_.c_str());
    for (const std::string& folder : made_) ::rmdir(folder.c_str());  // only where empty again
  }
  std::vector<std::string> made_;
  std::string lock_file_;
  bool lock_file_made_ = false;
  std::optional<ckpt::CheckpointDirLock> lock_;
  bool kept_ = false;
};

double megabytes(std::int64_t bytes) {
  return static_cast<double>(bytes) / 1e6;
}

int convert(const ConvertArgs& args) {
  const int sources = int{!args.from.empty()} + int{!args.from_hf.empty()} + int{args.init};
  const int targets = int{!args.to_hf.empty()} + int{!args.to.empty()};
  if (sources != 1) return bad_input("convert needs exactly one of --from, --from-hf, --init");
  if (targets != 1) return bad_input("convert needs exactly one of --to-hf, --to");
  if (!args.from.empty() && !args.to.empty())
    return bad_input("--from and --to are both ptrain checkpoints: nothing to convert (use --to-hf)");
  if (!args.from_hf.empty() && !args.to_hf.empty())
    return bad_input("--from-hf and --to-hf are both HF models: nothing to convert (use --to)");

  const config::LoadResult job = load_job(args.job, std::nullopt);
  print_diagnostics(job.diags);
  if (!job.ok()) return kExitBadInput;
  const config::JobSpec& spec = job.spec;

  try {
    // The source against the job first, reading headers and manifests only: a mismatch is bad input
    // said at once at any model size, with nothing created or allocated.
    std::optional<ckpt::LoadedCheckpoint> checkpoint;
    if (!args.from_hf.empty()) ckpt::check_hf(args.from_hf, spec.model);
    if (!args.from.empty()) {
      std::vector<std::string> warnings;
      checkpoint.emplace(ckpt::open_checkpoint(args.from, &warnings));
      warnings.insert(warnings.end(), checkpoint->warnings().begin(), checkpoint->warnings().end());
      for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
      if (const auto bad = ckpt::model_mismatches(checkpoint->job_meta(), spec.model); !bad.empty()) {
        std::string message = checkpoint->path() + " holds another model than " + args.job.job_path + ":";
        for (const std::string& b : bad) message += "\n  " + b;
        return bad_input(message);
      }
      for (const std::string& change : ckpt::model_changes(checkpoint->job_meta(), spec.model))
        std::fprintf(stderr, "warning: the job's model differs from the checkpoint's where the weights still fit: %s\n",
                     change.c_str());
    }
    // --to: the checkpoint directory is this process's while it writes, as a job's is while it
    // runs (a directory a running job holds is refused, before any work).
    std::optional<ConvertTarget> target;
    if (!args.to.empty()) {
      target.emplace(args.to);
      for (const std::string& w : target->lock().warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
      if (const auto refusal = holds_checkpoints(args.to)) return bad_input(*refusal);
    }
    // --to-hf: a path that cannot be a writable directory is bad input, said before any work. The
    // export is written aside and moved in at the end (ckpt/hf_output.h), where what is checked here
    // is checked again: another export may have got there first.
    std::optional<ckpt::HfOutput> hf_output;
    if (!args.to_hf.empty()) {
      const std::string model = ckpt::join_path(args.to_hf, ckpt::HfOutput::kModelFile);
      std::error_code ec;
      if (!args.force && std::filesystem::exists(std::filesystem::symlink_status(model, ec)))
        return bad_input(model + " exists (an earlier export, or a download): not replacing it (fix: give --to-hf "
                         "another directory, or --force to replace it)");
      hf_output.emplace(args.to_hf, "--to-hf", args.force);
    }
    model::ParamStore store = whole_model(spec);
    std::string source;
    std::int64_t step = 0;
    if (args.init) {
      store.initialize(spec.train.seed, spec.model.layers);
      source = "a freshly initialised model (seed " + std::to_string(spec.train.seed) + ")";
    } else if (!args.from_hf.empty()) {
      const ckpt::HfImportResult r = ckpt::import_hf(args.from_hf, spec.model, store);
      for (const std::string& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
      for (const std::string& note : r.notes) std::printf("note: %s\n", note.c_str());
      source = "HF model " + args.from_hf;
    } else {
      ckpt::restore_flat_shards(*checkpoint, store, {ckpt::whole_store(store)});
      step = checkpoint->step();
      source = "checkpoint " + checkpoint->path() + " (step " + std::to_string(step) + ")";
    }

    if (!args.to_hf.empty()) {
      const ckpt::HfExportResult r = ckpt::export_hf(store, spec.model, *hf_output);
      std::printf("wrote %s (%lld tensors, %.1f MB, fp32) and %s from %s\n", r.model_path.c_str(),
                  static_cast<long long>(r.tensors), megabytes(r.bytes), r.config_path.c_str(),
                  source.c_str());
      return kExitOk;
    }
    const nlohmann::json state = {{"step", 0}, {"consumed_samples", 0}, {"converted_from", source}};
    nlohmann::json meta = ckpt::job_meta(spec);
    // The layout that wrote the files: this one process (any layout can load it).
    for (const char* axis : {"tp", "pp", "dp", "cp", "ep", "world", "virtual_stages"})
      meta["layout"][axis] = 1;
    meta["layout"]["zero"] = 0;
    const std::string path =
        ckpt::save_checkpoint(args.to, 0, meta, state, ckpt::flat_shard_tensors(store, {ckpt::whole_store(store)}), /*keep=*/0);
    target->keep();
    std::printf("wrote %s (step 0, %zu tensors, fresh optimizer state) from %s\n", path.c_str(),
                store.slots().size(), source.c_str());
    return kExitOk;
  } catch (const ckpt::CheckpointError& e) {
    return bad_input(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitRuntimeFailure;
  }
}

}  // namespace

void add_convert_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "convert",
      "Convert between Hugging Face safetensors and ptrain checkpoints for the job's model:\n"
      "  ptrain convert job.yaml --from CKPT --to-hf DIR     (CKPT: a step_<N> directory, or checkpoint.dir: "
      "latest)\n"
      "  ptrain convert job.yaml --from-hf DIR --to CKPT_DIR (writes step_0 with fresh optimizer state)\n"
      "  ptrain convert job.yaml --init --to CKPT_DIR | --to-hf DIR   (a freshly initialised model)");
  add_job_args(*cmd, args->job);
  cmd->add_option("--from", args->from,
                  "ptrain checkpoint: a step directory or a checkpoint directory (latest)");
  cmd->add_option("--from-hf", args->from_hf,
                  "HF model directory (config.json + model.safetensors[.index.json])");
  cmd->add_flag("--init", args->init, "Start from a freshly initialised model (train.seed)");
  CLI::Option* to_hf =
      cmd->add_option("--to-hf", args->to_hf, "Write model.safetensors + config.json into this directory")
          ->check(non_empty());
  cmd->add_option("--to", args->to, "Write a step_0 checkpoint into this checkpoint directory")->check(non_empty());
  cmd->add_flag("--force", args->force, "Replace a model.safetensors already in --to-hf")->needs(to_hf);
  cmd->callback([args, &exit_code] { exit_code = convert(*args); });
}

}  // namespace ptrain::app
