#include "app/job_loading.h"

#include <cstdio>

#include "engine/train/engine_limits.h"

namespace ptrain::app {

void add_job_args(CLI::App& command, JobArgs& args) {
  command.add_option("job", args.job_path, "Job spec (YAML)")->required();
  command.add_option("--set", args.overrides, "Override a key: --set parallel.tp=4 (repeatable; same checks as YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

config::LoadResult load_job(const JobArgs& args, std::optional<int> world) {
  config::LoadOptions opts;
  opts.overrides = args.overrides;
  opts.world = world;
  return config::load_file(args.job_path, opts);
}

const plan::HardwareProfile* find_job_hardware(config::LoadResult& job) {
  const plan::HardwareProfile* hw = plan::find_hardware(job.spec.cluster.gpu);
  if (hw != nullptr) return hw;
  std::string known;
  for (const auto& name : plan::hardware_names()) known += (known.empty() ? "" : ", ") + name;
  job.diags.errors.push_back(
      job.at("cluster.gpu", "unknown GPU '" + job.spec.cluster.gpu + "'", "use one of: " + known));
  return nullptr;
}

std::optional<plan::Estimate> estimate_job(config::LoadResult& job) {
  const plan::HardwareProfile* hw = find_job_hardware(job);
  if (hw == nullptr) return std::nullopt;
  return plan::estimate(job, *hw);
}

std::vector<config::Diagnostic> engine_limit_warnings(const config::LoadResult& job) {
  std::vector<config::Diagnostic> out;
  for (const train::EngineLimit& limit : train::engine_limits(job.spec))
    out.push_back(job.at(limit.key, limit.message, limit.fix));
  return out;
}

void print_diagnostics(const config::Diagnostics& diags) {
  for (const auto& d : diags.errors) std::fprintf(stderr, "error: %s\n", d.format().c_str());
  for (const auto& d : diags.warnings) std::fprintf(stderr, "warning: %s\n", d.format().c_str());
}

}  // namespace ptrain::app
