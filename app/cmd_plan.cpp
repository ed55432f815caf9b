// `ptrain plan job.yaml --gpus N [--gpu NAME]`: searches the job's layouts for N GPUs with the
// model `validate` uses (engine/plan/search.h), prints the fastest ranked, and writes the best as a
// ready job file: the user's YAML with the layout and cluster keys set.
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/job_loading.h"
#include "app/json_writer.h"
#include "app/output_file.h"
#include "app/plan_progress.h"
#include "app/plan_verify.h"
#include "engine/config/engine_limits.h"
#include "engine/config/yaml_edit.h"
#include "engine/io/input_file.h"
#include "engine/io/output_probe.h"
#include "engine/plan/estimate.h"
#include "engine/plan/hardware.h"
#include "engine/plan/memory_limit.h"
#include "engine/plan/search.h"

namespace ptrain::app {
namespace {

// The first line of every file plan writes; plan replaces such a file, never another one.
constexpr const char* kWrittenByPlan = "# Written by `ptrain plan`";

struct PlanArgs {
  JobArgs job;
  int gpus = 0;
  std::string gpu;
  int top = 10;
  std::string out;
  bool force = false;
  bool json = false;
  int verify = 0;  // > 0: run the best `verify` layouts for a few steps here
  int verify_rounds = 3;  // runs of each, interleaved: the median is its measured step
};

constexpr int kVerifySteps = 8;

int bad_input(const std::string& message, const std::string& fix) {
  std::fprintf(stderr, "error: %s%s\n", message.c_str(), fix.empty() ? "" : (" (fix: " + fix + ")").c_str());
  return kExitBadInput;
}

int bad_job(const config::Diagnostics& diags) {
  print_diagnostics(diags);
  std::fprintf(stderr, "invalid: %zu problem%s\n", diags.errors.size(), diags.errors.size() == 1 ? "" : "s");
  return kExitBadInput;
}

// cluster.* keys for N GPUs: whole nodes of cluster.gpus_per_node, or one smaller node.
std::optional<std::vector<std::string>> cluster_assignments(const PlanArgs& args, int gpus_per_node) {
  std::vector<std::string> keys;
  if (args.gpus >= gpus_per_node) {
    if (args.gpus % gpus_per_node != 0) return std::nullopt;
    keys.push_back("cluster.nodes=" + std::to_string(args.gpus / gpus_per_node));
  } else {
    keys.push_back("cluster.nodes=1");
    keys.push_back("cluster.gpus_per_node=" + std::to_string(args.gpus));
  }
  if (!args.gpu.empty()) keys.push_back("cluster.gpu=" + args.gpu);
  return keys;
}

std::string default_out_path(const std::string& job_path) {
  return std::filesystem::path(job_path).stem().string() + ".plan.yaml";
}

bool written_by_plan(const std::string& path) {
  try {
    const io::InputFile file(path);
    return file.size() < (1 << 20) && file.read_all().rfind(kWrittenByPlan, 0) == 0;
  } catch (const io::FileError&) {  // a named pipe, a directory: nothing plan wrote
    return false;
  }
}

std::string schedule_text(const plan::Layout& l) {
  std::string text = config::to_string(l.schedule);
  if (l.virtual_stages > 1) text += " x" + std::to_string(l.virtual_stages);
  if (l.max_in_flight > 0) text += " <=" + std::to_string(l.max_in_flight);
  return text;
}

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string gib(double bytes) {
  return fmt("%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

// "N layouts, I break a rule, M exceed memory"
std::string counts(const plan::SearchResult& r) {
  return std::to_string(r.layouts) + " layout" + (r.layouts == 1 ? "" : "s") + ", " +
         std::to_string(r.invalid) + " break a rule, " + std::to_string(r.over_memory) + " exceed memory";
}

std::string human_table(const plan::SearchResult& r, const std::string& job_path,
                        const plan::HardwareProfile& hw, int gpus, bool experts) {
  std::string out = "plan for " + job_path + " on " + std::to_string(gpus) + " x " + hw.name + ": " +
                    counts(r) + ", " + std::to_string(r.fitting) + " fit; " + std::to_string(r.estimated) +
                    " estimated in full\n";
  out += std::string("  #  tp  cp  cp_comm    pp     dp") + (experts ? "  ep" : "") +
         "  schedule                 mb  recompute  zero  precision"
         "     memory  bubble     step   tok/s/GPU    MFU\n";
  int row = 0;
  for (const plan::RankedLayout& ranked : r.best) {
    const plan::Layout& l = ranked.layout;
    const plan::Estimate& e = ranked.estimate;
    char line[256];
    std::snprintf(line, sizeof line, "%3d %3d %3d  %-9s %3d %6d", ++row, l.tp, l.cp,
                  l.cp > 1 ? config::to_string(l.cp_comm) : "-", l.pp, ranked.job.spec.parallel.dp);
    out += line;
    if (experts) {
      std::snprintf(line, sizeof line, "%4d", l.ep);
      out += line;
    }
    std::snprintf(
        line, sizeof line, "  %-23s %4d  %-9s  %4d  %-9s  %5.1f GiB  %5.1f%%  %6.3f s  %10.0f  %5.1f%%\n",
        schedule_text(l).c_str(), l.micro_batch, config::to_string(l.recompute), l.zero,
        config::to_string(l.precision), e.peak_memory_bytes() / (1024.0 * 1024.0 * 1024.0),
        100 * e.bubble_fraction, e.step_time_s, e.tokens_per_step / e.step_time_s / gpus, 100 * e.mfu);
    out += line;
  }
  out += "step times from " + (r.best.empty() ? std::string("-") : r.best.front().estimate.compute_model) +
         "; expected error: " + plan::expected_error(hw.measured.get(), hw.device_is_host()) + "\n";
  if (r.first_fp8_refusal) {
    const config::EngineLimit& why = *r.first_fp8_refusal;
    out += "fp8 not tried in " + std::to_string(r.fp8_refused) + " layout" + (r.fp8_refused == 1 ? "" : "s") +
           ", which `ptrain run` would refuse in fp8: e.g. " + why.key + ": " + why.message + "\n";
  }
  return out;
}

std::string json_table(const plan::SearchResult& r, const plan::HardwareProfile& hw, int gpus,
                       const std::string& written, const std::vector<VerifiedLayout>& verified) {
  JsonWriter w;
  w.begin_object();
  w.key("gpus").value(gpus).key("gpu").value(hw.name);
  w.key("layouts").value(r.layouts).key("invalid").value(r.invalid).key("over_memory").value(r.over_memory);
  w.key("fitting").value(r.fitting).key("estimated").value(r.estimated);
  w.key("written").value(written);
  w.key("fp8_refused").value(r.fp8_refused);
  if (r.first_fp8_refusal) {
    const config::EngineLimit& why = *r.first_fp8_refusal;
    w.key("fp8_refusal").begin_object();
    w.key("key").value(why.key).key("message").value(why.message).key("fix").value(why.fix);
    w.end_object();
  }
  w.key("expected_error").value(plan::expected_error(hw.measured.get(), hw.device_is_host()));
  w.key("ranked").begin_array();
  for (const plan::RankedLayout& ranked : r.best) {
    const plan::Layout& l = ranked.layout;
    const plan::Estimate& e = ranked.estimate;
    w.begin_object();
    w.key("tp").value(l.tp).key("cp").value(l.cp).key("cp_comm").value(config::to_string(l.cp_comm));
    w.key("pp").value(l.pp).key("dp").value(ranked.job.spec.parallel.dp);
    w.key("ep").value(l.ep).key("schedule").value(config::to_string(l.schedule));
    w.key("virtual_stages").value(l.virtual_stages).key("layers_per_stage").value(l.layers_per_stage);
    w.key("max_in_flight").value(l.max_in_flight);
    w.key("micro_batch").value(l.micro_batch).key("recompute").value(config::to_string(l.recompute));
    w.key("zero").value(l.zero).key("precision").value(config::to_string(l.precision));
    w.key("peak_memory_bytes").value(e.peak_memory_bytes()).key("bubble_fraction").value(e.bubble_fraction);
    w.key("step_time_s").value(e.step_time_s).key("tokens_per_s").value(e.tokens_per_step / e.step_time_s);
    w.key("mfu").value(e.mfu);
    w.end_object();
  }
  w.end_array();
  if (!verified.empty()) {
    w.key("verified").begin_array();
    for (const VerifiedLayout& v : verified) {
      w.begin_object().key("row").value(v.row).key("predicted_s").value(v.predicted_s);
      if (v.measured_s) {
        w.key("measured_s").value(*v.measured_s).key("round_s").begin_array();
        for (const double s : v.round_s) w.value(s);
        w.end_array();
      } else {
        w.key("failure").value(v.failure);
      }
      w.end_object();
    }
    w.end_array();
    if (const std::optional<double> ratio = choice_over_fastest(verified))
      w.key("choice_over_fastest").value(*ratio);
  }
  w.end_object();
  return w.str();
}

std::string file_header(const std::string& job_path, const plan::HardwareProfile& hw, int gpus,
                        const plan::RankedLayout& best) {
  return std::string(kWrittenByPlan) + " from " + job_path + " for " + std::to_string(gpus) + " x " +
         hw.name + ": the fastest layout found,\n# predicted step " +
         fmt("%.3f s", best.estimate.step_time_s) + ", MFU " + fmt("%.1f%%", 100 * best.estimate.mfu) +
         ", peak memory " + gib(best.estimate.peak_memory_bytes()) +
         " per GPU. `ptrain validate` on this file gives the full report.\n";
}

// Why nothing fits: memory (with the leanest layout found) or, when no layout got that far, a rule.
int no_layout(const plan::SearchResult& r, const std::string& path, const plan::HardwareProfile& hw, int gpus,
              bool experts, const plan::MemoryLimit& limit) {
  const std::string where =
      "no layout of " + path + " fits on " + std::to_string(gpus) + " x " + hw.name + ": ";
  if (r.least_memory) {
    std::string keys;
    for (const std::string& key : plan::layout_assignments(*r.least_memory, experts)) keys += " " + key;
    const std::string shared =
        limit.ranks > 1 ? " shared by a node's " + std::to_string(limit.ranks) + " ranks" : "";
    return bad_input(where + counts(r) + "; the least memory is " + gib(r.least_memory_bytes) + " per rank (" +
                         gib(limit.bytes) + shared + " available), with" + keys,
                     "use more GPUs, a larger device (--gpu), or a smaller model or train.global_batch");
  }
  if (r.first_rule_broken) {
    return bad_input(where + counts(r) + "; e.g. " + r.first_rule_broken->message, r.first_rule_broken->fix);
  }
  return bad_input(where + "train.global_batch is smaller than the data-parallel degree of every layout",
                   "use fewer GPUs or a larger train.global_batch");
}

int run_plan(const PlanArgs& args) {
  const std::string& path = args.job.job_path;
  config::Diagnostics read_problems;
  const std::optional<std::string> text = config::read_job_file(path, read_problems);
  if (!text) return bad_job(read_problems);

  config::LoadOptions read;
  read.overrides = args.job.overrides;
  read.derive = false;  // the layout keys are the plan's to choose; search_layouts derives each
  config::LoadResult as_written = config::load_string(*text, path, read);
  check_environment(as_written.diags);
  if (!as_written.ok()) return bad_job(as_written.diags);
  const int per_node = as_written.spec.cluster.gpus_per_node;
  const std::optional<std::vector<std::string>> cluster = cluster_assignments(args, per_node);
  if (!cluster) {
    return bad_input(
        "--gpus " + std::to_string(args.gpus) + " is not a whole number of nodes of " +
            std::to_string(per_node) + " GPUs (cluster.gpus_per_node)",
        "use a multiple of " + std::to_string(per_node) + ", or --set cluster.gpus_per_node=...");
  }
  if (args.verify > 0 && args.gpus > per_node)
    return bad_input("--verify runs the layouts on this machine, but --gpus " + std::to_string(args.gpus) +
                         " spans more than one node of " + std::to_string(per_node) + " (cluster.gpus_per_node)",
                     "plan for at most " + std::to_string(per_node) + " GPUs, or leave out --verify");
  read.overrides.insert(read.overrides.end(), cluster->begin(), cluster->end());
  config::LoadResult job = config::load_string(*text, path, read);
  if (!job.ok()) return bad_job(job.diags);

  const std::optional<plan::HardwareProfile> hw = find_job_hardware(job);
  if (!hw) return bad_job(job.diags);
  // --out before the search (which takes a while for a large --gpus): bad input at once.
  const std::string out_path = args.out.empty() ? default_out_path(path) : args.out;
  if (const std::string other = io::other_kind_at(out_path, io::OutputKind::File); !other.empty())
    return bad_input(out_path + " is " + other + ", not a regular file; not replacing it", "pass --out with a file's path");
  if (refuse_replacing_foreign_file(out_path, "plan", args.force, written_by_plan) ||
      refuse_unwritable_output("--out", out_path))
    return kExitBadInput;
  // The rules that do not depend on the layout, checked once on a layout that breaks none of the
  // others (one rank, one microbatch), so a bad job is reported as such rather than as "no layout".
  plan::Layout one_microbatch;
  one_microbatch.micro_batch = job.spec.train.global_batch;
  one_microbatch.precision = job.spec.train.precision;
  config::JobSpec single = plan::with_layout(job.spec, one_microbatch);
  single.world = 1;
  if (const config::LoadResult checked = config::rederive(job, single); !checked.ok())
    return bad_job(checked.diags);

  job.spec.world = args.gpus;
  PlanProgress progress;  // on stderr, where a search takes more than a second
  const plan::SearchResult result = plan::search_layouts(job, *hw, args.top, std::ref(progress));
  progress.finish(result);
  const bool experts = job.spec.model.arch == config::Arch::Mixtral;
  if (result.best.empty())
    return no_layout(result, path, *hw, args.gpus, experts, plan::memory_limit(job.spec, *hw));

  const plan::RankedLayout& best = result.best.front();
  std::vector<std::string> keys = read.overrides;
  for (const std::string& key : plan::layout_assignments(best.layout, experts)) keys.push_back(key);
  const std::string yaml = file_header(path, *hw, args.gpus, best) + config::yaml_with_values(*text, keys);

  // The file must be what the table says: loaded and estimated as `validate` would.
  const config::LoadResult reloaded = config::load_string(yaml, out_path);
  if (!reloaded.ok() || plan::estimate(reloaded, *hw).step_time_s != best.estimate.step_time_s) {
    print_diagnostics(reloaded.diags);
    std::fprintf(stderr,
                 "internal error: the written layout does not reproduce the plan; please report this\n");
    return kExitRuntimeFailure;
  }
  if (!write_output_file(out_path, yaml)) return kExitRuntimeFailure;

  if (!args.json) {
    std::printf("%s", human_table(result, path, *hw, args.gpus, experts).c_str());
    std::printf("wrote %s (row 1); `ptrain validate %s` shows its full report\n", out_path.c_str(),
                out_path.c_str());
    std::fflush(stdout);
  }
  std::vector<VerifiedLayout> verified;
  if (args.verify > 0) {
    try {
      verified = verify_layouts(*text, read.overrides, result.best, args.verify, experts, kVerifySteps,
                                args.verify_rounds);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: --verify: %s\n", e.what());
      return kExitRuntimeFailure;
    }
    if (!args.json) std::printf("%s", verify_table(verified).c_str());
  }
  if (args.json) std::printf("%s\n", json_table(result, *hw, args.gpus, out_path, verified).c_str());
  std::fflush(stdout);
  std::vector<config::Diagnostic> warnings = job.diags.warnings;  // the hardware's (an unknown GPU's profile)
  warnings.insert(warnings.end(), best.job.diags.warnings.begin(), best.job.diags.warnings.end());
  for (config::Diagnostic& limit : engine_limit_warnings(reloaded)) warnings.push_back(std::move(limit));
  print_diagnostics({{}, warnings});
  return args.verify > 0 ? verify_exit_code(verified) : kExitOk;
}

}  // namespace

void add_plan_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "plan",
      "Search TP x CP x PP x schedule x EP x micro-batch x ZeRO x recompute (and, where a pipeline does not\n"
      "fit, a cap on its microbatches in flight) x precision for N GPUs with validate's model\n"
      "(memory, communication, simulated pipeline); print the fastest layouts that fit and write the best\n"
      "as a ready job file. A bf16 or fp8 job is tried in bf16 and, where `ptrain run` executes it, in fp8\n"
      "(an fp32 job stays fp32). Exit 0 = written, 2 = bad job or flags, or no layout fits.");
  add_job_args(*cmd, args->job);
  cmd->add_option("--gpus", args->gpus, "GPUs to plan for (whole nodes of cluster.gpus_per_node, or fewer)")
      ->required()
      ->check(whole_number_in(1, 1 << 20));
  cmd->add_option("--gpu", args->gpu, "Device kind (default: cluster.gpu): h100-sxm, h200, a100-80g, cpu")
      ->check(non_empty());
  cmd->add_option("--top", args->top, "Rows in the ranking")
      ->check(whole_number_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Where to write the best layout (default: <job name>.plan.yaml here)")
      ->check(non_empty());
  cmd->add_flag("--force", args->force, "Replace --out even if ptrain plan did not write it");
  cmd->add_flag("--json", args->json, "Print the ranking as one JSON object");
  CLI::Option* verify = cmd->add_option("--verify", args->verify,
                  "Run the best K layouts for " + std::to_string(kVerifySteps) +
                      " steps, --verify-rounds times each (interleaved), on this machine and report which was "
                      "really fastest")
      ->check(whole_number_in(1, 100));
  cmd->add_option("--verify-rounds", args->verify_rounds,
                  "With --verify: runs of each layout, whose median is its step (more: less of the machine's "
                  "noise between layouts that are close)")
      ->check(whole_number_in(1, 50))
      ->capture_default_str()
      ->needs(verify);
  cmd->callback([args, &exit_code] { exit_code = run_plan(*args); });
}

}  // namespace ptrain::app
