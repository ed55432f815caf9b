// Flags every job-taking command shares (job path, --set) and loading the job with its problems
// printed the same way everywhere.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/config/loader.h"

namespace ptrain::app {

struct JobArgs {
  std::string job_path;
  std::vector<std::string> overrides;  // --set key=value
};

void add_job_args(CLI::App& command, JobArgs& args);

config::LoadResult load_job(const JobArgs& args, std::optional<int> world);

// Problems and warnings to stderr, one per line, errors first.
void print_diagnostics(const config::Diagnostics& diags);

}  // namespace ptrain::app
