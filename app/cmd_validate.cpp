// `ptrain validate job.yaml [--world N] [--json]`: the dry run. No allocation, no communication.
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "app/commands.h"
#include "app/core_sharing.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/job_loading.h"
#include "app/validate_report.h"
#include "engine/config/rules.h"
#include "engine/plan/estimate.h"

namespace ptrain::app {
namespace {

struct ValidateArgs {
  JobArgs job;
  std::optional<int> world;
  bool json = false;
};

int emit_problems(const config::Diagnostics& diags, bool json) {
  if (json) {
    std::printf("%s\n", json_diagnostics(diags).c_str());
  } else {
    print_diagnostics(diags);
    std::fprintf(stderr, "invalid: %zu problem%s\n", diags.errors.size(), diags.errors.size() == 1 ? "" : "s");
  }
  return kExitBadInput;
}

int run_validate(const ValidateArgs& args) {
  config::LoadResult job = load_job(args.job, args.world);
  if (!job.ok()) return emit_problems(job.diags, args.json);

  const std::optional<plan::HardwareProfile> hw = find_job_hardware(job);  // as estimate_job, keeping the profile
  if (!hw) return emit_problems(job.diags, args.json);
  plan::Estimate est = plan::estimate(job, *hw);
  est.diags.warnings.insert(est.diags.warnings.begin(), job.diags.warnings.begin(), job.diags.warnings.end());
  const std::vector<config::Diagnostic> limits = engine_limit_warnings(job);
  est.diags.warnings.insert(est.diags.warnings.end(), limits.begin(), limits.end());
  if (std::optional<config::Diagnostic> shared = node_oversubscription(job, *hw))
    est.diags.warnings.push_back(std::move(*shared));
  const bool valid = est.diags.ok();
  if (args.json) {
    std::printf("%s\n", json_report(job.spec, est).c_str());
  } else {
    std::printf("%s", human_report(job.spec, est, limits.empty()).c_str());
    std::fflush(stdout);  // the report first, then its problems
    print_diagnostics(est.diags);
  }
  return valid ? kExitOk : kExitBadInput;
}

}  // namespace

void add_validate_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "validate",
      "Dry run: check the job and report the rank grid, memory per rank, FLOPs, communication per link\n"
      "tier, pipeline bubble (simulating the real schedule), step time and MFU. Exit 0 = would run, 2 = invalid.");
  add_job_args(*cmd, args->job);
  cmd->add_option("--world", args->world, "Validate for this many ranks (default: cluster.nodes * gpus_per_node)")
      ->check(whole_number_in(1, config::kMaxWorld));
  cmd->add_flag("--json", args->json, "Print one JSON object (fields in docs/validate.md)");
  cmd->callback([args, &exit_code] { exit_code = run_validate(*args); });
}

}  // namespace ptrain::app
