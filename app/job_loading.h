// Flags every job-taking command shares (job path, --set) and loading the job with its problems
// printed the same way everywhere.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/loader.h"
#include "engine/plan/estimate.h"
#include "engine/plan/hardware.h"

namespace ptrain::app {

struct JobArgs {
  std::string job_path;
  std::vector<std::string> overrides;  // --set key=value
};

void add_job_args(CLI::App& command, JobArgs& args);

// The job with its problems, and the environment's (check_environment).
config::LoadResult load_job(const JobArgs& args, std::optional<int> world);

// An error for each environment variable the commands read that holds a value they do not take
// (PTRAIN_CUDNN_ATTENTION: the CUDA backend's attention and validate's memory).
void check_environment(config::Diagnostics& diags);

// The profile of the job's cluster.gpu with the measurement in cluster.profile if it names one
// (carried there from another GPU's), the built-in one on a GPU if it names none, none for `peak`;
// or nullopt after adding the error to job.diags: an unknown GPU (located at cluster.gpu, listing
// the known names), a profile file that cannot be read or is not one, or a CPU's for a GPU job and
// the reverse (at cluster.profile).
std::optional<plan::HardwareProfile> find_job_hardware(config::LoadResult& job);

// validate's verdict beyond the rules, which `run` applies too: the hardware profile of
// cluster.gpu exists and plan::estimate finds the job fits its memory. nullopt when the GPU is
// unknown (the error is added to job.diags); else the estimate, whose diags hold its problems.
std::optional<plan::Estimate> estimate_job(config::LoadResult& job);

// A warning at each key that asks for what this build's `ptrain run` does not execute yet
// (config::engine_limits; the CUDA backend unless the job says cpu): what validate and plan add.
std::vector<config::Diagnostic> engine_limit_warnings(const config::LoadResult& job);

// An error at each of logging.metrics, logging.trace, logging.tensorboard and checkpoint.dir that
// names something other than a file (a folder for the last two) or nothing: a FIFO there would hold the run at its
// first write (and a stop signal with it), a directory fail it after minutes; at each of the first
// three inside checkpoint.dir, whose files the checkpoints replace. `run`'s, before a rank starts.
std::vector<config::Diagnostic> run_output_errors(const config::LoadResult& job);

// Problems and warnings to stderr, one per line, errors first.
void print_diagnostics(const config::Diagnostics& diags);

}  // namespace ptrain::app
