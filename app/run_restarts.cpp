#include "app/run_restarts.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "app/exit_codes.h"
#include "engine/ckpt/checkpoint.h"

namespace ptrain::app {
namespace {

// A whole number of 0 or more from the environment; nullopt when unset or not one.
std::optional<int> count_from_env(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0 || n > 1'000'000) return std::nullopt;
  return static_cast<int>(n);
}

// The step of the last metrics row of `path`, if it has one.
std::optional<std::int64_t> last_logged_step(const std::string& path) {
  std::ifstream in(path);
  std::optional<std::int64_t> step;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.contains("step") && row["step"].is_number_integer()) step = row["step"].get<std::int64_t>();
  }
  return step;
}

}  // namespace

int restart_attempt() {
  if (const std::optional<int> ours = count_from_env("PTRAIN_RESTART_ATTEMPT")) return *ours;
  return count_from_env("SLURM_RESTART_COUNT").value_or(0);
}

std::string resume_note(const config::JobSpec& spec) {
  std::int64_t from = 0;
  std::string note;
  const std::string& dir = spec.checkpoint.dir;
  if (const std::optional<std::string> latest = dir.empty() ? std::nullopt : ckpt::latest_checkpoint(dir)) {
    from = ckpt::parse_step_dir_name(std::filesystem::path(*latest).filename().string()).value_or(0);
    note = "; resuming from step " + std::to_string(from) + " (the latest checkpoint in " + dir + ")";
  } else {
    note = dir.empty() ? "; no checkpoint.dir: starting from step 0" : "; no checkpoint in " + dir + " yet: starting from step 0";
  }
  const std::optional<std::int64_t> logged =
      spec.logging.metrics.empty() ? std::nullopt : last_logged_step(spec.logging.metrics);
  if (logged && *logged >= from)
    note += "; the run had logged step " + std::to_string(*logged) + ": " + std::to_string(*logged - from) +
            " step(s) lost, trained again";
  return note;
}

int requeue_exit_code(int code, int max_restarts, int attempt) {
  return code == kExitRuntimeFailure && attempt < max_restarts ? kExitRestart : code;
}

}  // namespace ptrain::app
