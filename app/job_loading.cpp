#include "app/job_loading.h"

#include <cstdio>

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

void print_diagnostics(const config::Diagnostics& diags) {
  for (const auto& d : diags.errors) std::fprintf(stderr, "error: %s\n", d.format().c_str());
  for (const auto& d : diags.warnings) std::fprintf(stderr, "warning: %s\n", d.format().c_str());
}

}  // namespace ptrain::app
