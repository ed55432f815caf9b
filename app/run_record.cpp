#include "app/run_record.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "engine/config/loader.h"
#include "engine/config/yaml_edit.h"

namespace ptrain::app {

void record_run_job(const std::string& job_path, const std::vector<std::string>& overrides,
                    const std::string& metrics_path) {
  namespace fs = std::filesystem;
  if (metrics_path.empty()) return;
  const fs::path dir = fs::path(metrics_path).parent_path();
  const fs::path target = (dir.empty() ? fs::path(".") : dir) / "job.yaml";
  std::error_code ec;
  if (fs::equivalent(target, job_path, ec)) {
    if (!overrides.empty())
      std::fprintf(stderr,
                   "warning: %s is the job file, so the run's --set overrides are not recorded beside its "
                   "metrics: give `ptrain report` the same --set\n",
                   target.c_str());
    return;
  }
  config::Diagnostics problems;
  const std::optional<std::string> text = config::read_job_file(job_path, problems);
  if (!text) return;  // loaded a moment ago; gone since: nothing to record
  std::string record = "# The job of this run: " + job_path;
  for (const std::string& o : overrides) record += " --set " + o;
  record += "\n# (written by `ptrain run`; `ptrain report` reads it)\n" + config::yaml_with_values(*text, overrides);
  // Written whole, then renamed over the old one: a reader never sees half a file.
  const fs::path partial = fs::path(target).concat(".partial");
  fs::create_directories(target.parent_path(), ec);
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  out << record;
  out.close();
  if (out) fs::rename(partial, target, ec);
  if (!out || ec) {
    fs::remove(partial, ec);
    std::fprintf(stderr, "warning: cannot write %s: `ptrain report` will need --job\n", target.c_str());
  }
}

}  // namespace ptrain::app
