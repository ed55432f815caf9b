#include "app/job_identity.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "engine/config/overrides.h"
#include "engine/io/input_file.h"
#include "engine/launch/worker_env.h"

namespace ptrain::app {
namespace {

constexpr std::array<std::string_view, 6> kRankZeroOutputs = {
    "logging.metrics",         "logging.tensorboard",    "logging.every",
    "logging.trace",           "logging.straggler_ratio", "logging.straggler_steps"};

bool rank_zero_output(const std::string& override_text) {
  const std::optional<config::Assignment> a = config::split_assignment(override_text);
  return a && std::find(kRankZeroOutputs.begin(), kRankZeroOutputs.end(), a->path) != kRankZeroOutputs.end();
}

}  // namespace

std::string job_identity(const JobArgs& job, const config::JobSpec& spec) {
  std::string text = io::read_input_file(job.job_path);
  for (const std::string& o : job.overrides)
    if (!rank_zero_output(o)) text += "\n# --set " + o;
  text += std::string("\n# logging.trace ") + (spec.logging.trace.empty() ? "off" : "on");
  return dist::text_digest(text);
}

}  // namespace ptrain::app
