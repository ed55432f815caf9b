#include "app/run_logs.h"

#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/log/log.h"

namespace ptrain::app {

void log_as(const std::optional<dist::WorkerEnv>& env, int world) {
  log::Identity who;
  who.host = env && !env->host.empty() ? env->host : log::host_name();
  if (env) {
    who.rank = env->rank;
    who.world = env->world;
    who.local_rank = env->local_rank;
  } else if (world > 1) {
    who.role = "launcher";
  } else {
    who.rank = 0;
  }
  log::set_identity(who);
}

void open_run_log(const config::JobSpec& spec, const std::optional<dist::WorkerEnv>& env) {
  if (spec.logging.metrics.empty()) return;
  const bool launcher = !env && spec.world > 1;
  const std::string name = launcher ? "launcher.log" : "rank_" + std::to_string(env ? env->rank : 0) + ".log";
  const std::filesystem::path dir = std::filesystem::path(spec.logging.metrics).parent_path() / "logs";
  try {
    log::add_file((dir / name).string());
  } catch (const std::runtime_error& e) {
    log::train().warn("{}; this process logs to stderr only", e.what());
  }
}

void log_diagnostics(const config::Diagnostics& diags) {
  for (const config::Diagnostic& d : diags.errors) log::train().error(d.format());
  for (const config::Diagnostic& d : diags.warnings) log::train().warn(d.format());
}

}  // namespace ptrain::app
