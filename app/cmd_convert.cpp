// `ptrain convert job.yaml (--from CKPT | --from-hf DIR | --init) (--to-hf DIR | --to DIR)`:
// HF safetensors <-> ptrain checkpoint, for the job's model. The whole model is held in one process
// (tp = pp = ep = 1), whatever layout the job trains with; checkpoints of any layout are read.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

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

// The whole model, on one rank.
model::ParamStore whole_model(const config::JobSpec& spec) {
  return model::ParamStore(model::build_registry(spec.model), model::ShardCoords{});
}

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
    // --to: the checkpoint directory is this process's while it writes, as a job's is while it
    // runs (a directory a running job holds is refused, before any work).
    std::optional<ckpt::CheckpointDirLock> lock;
    if (!args.to.empty()) {
      lock.emplace(args.to);
      for (const std::string& w : lock->warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
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
      std::vector<std::string> warnings;
      ckpt::LoadedCheckpoint ckpt = ckpt::open_checkpoint(args.from, &warnings);
      warnings.insert(warnings.end(), ckpt.warnings().begin(), ckpt.warnings().end());
      for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
      if (const auto bad = ckpt::model_mismatches(ckpt.job_meta(), spec.model); !bad.empty()) {
        std::string message = ckpt.path() + " holds another model than " + args.job.job_path + ":";
        for (const std::string& b : bad) message += "\n  " + b;
        return bad_input(message);
      }
      for (const std::string& change : ckpt::model_changes(ckpt.job_meta(), spec.model))
        std::fprintf(stderr, "warning: the job's model differs from the checkpoint's where the weights still fit: %s\n",
                     change.c_str());
      ckpt::restore_flat_shards(ckpt, store, {ckpt::whole_store(store)});
      step = ckpt.step();
      source = "checkpoint " + ckpt.path() + " (step " + std::to_string(step) + ")";
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
