#include "app/run_record.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>

#include "engine/ckpt/file_io.h"
#include "engine/config/loader.h"
#include "engine/config/yaml_edit.h"
#include "engine/io/output_probe.h"
#include "engine/log/log.h"

namespace ptrain::app {
namespace {

constexpr const char* kRecordHeader = "# The job of this run: ";

// `text` on one line, for a YAML comment: a line break in a --set value or the job's path would end
// the comment, and what follows it would be read as the job (\n, \r written as such).
std::string one_line(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : std::string(1, c);
  return out;
}

// Whether the regular file `path` begins as record_run_job writes a record (a file of another
// origin is not replaced). Only the header's length is read.
bool written_by_run(const std::string& path) {
  const std::string_view header = kRecordHeader;
  std::string first(header.size(), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(first.data(), static_cast<std::streamsize>(first.size()));
  return in.gcount() == static_cast<std::streamsize>(header.size()) && first == header;
}

}  // namespace

train::RunSegmentSource run_segment_source(const std::string& job_path, const std::vector<std::string>& overrides) {
  train::RunSegmentSource source{job_path, ""};
  for (const std::string& o : overrides) source.command += " --set " + o;
  config::Diagnostics problems;
  if (const std::optional<std::string> text = config::read_job_file(job_path, problems))
    source.job_yaml = config::yaml_with_values(*text, overrides);
  return source;
}

void record_run_job(const std::string& job_path, const std::vector<std::string>& overrides,
                    const std::string& metrics_path, const train::RunSegmentSource& source) {
  namespace fs = std::filesystem;
  if (metrics_path.empty()) return;
  const fs::path dir = fs::path(metrics_path).parent_path();
  const fs::path target = (dir.empty() ? fs::path(".") : dir) / "job.yaml";
  std::error_code ec;
  if (fs::equivalent(target, job_path, ec)) {
    if (!overrides.empty())
      log::train().warn("{} is the job file, so the run's --set overrides are not recorded beside its metrics: "
                        "give `ptrain report` the same --set",
                        target.string());
    return;
  }
  // Not a regular file (a FIFO would hold the run in open, /dev/zero would never end a line):
  // nothing to read or replace.
  if (const std::string other = io::other_kind_at(target.string(), io::OutputKind::File); !other.empty()) {
    log::train().warn("cannot write {} ({}, not a regular file): `ptrain report` will need --job", target.string(),
                      other);
    return;
  }
  if (fs::exists(target, ec) && !written_by_run(target.string())) {
    log::train().warn("{} was not written by `ptrain run`: not replacing it with this run's job, so `ptrain report` "
                      "will need --job (or give logging.metrics another folder)",
                      target.string());
    return;
  }
  if (source.job_yaml.empty()) return;  // loaded a moment ago; gone since: nothing to record
  const std::string record = kRecordHeader + one_line(source.command) +
                             "\n# (written by `ptrain run`; `ptrain report` reads it)\n" + source.job_yaml;
  fs::create_directories(target.parent_path(), ec);  // as the metrics log does; a failure shows below
  try {
    ckpt::write_file_atomically(target.string(), record);  // a reader never sees half a file
  } catch (const std::exception& e) {
    log::train().warn("cannot write {} ({}): `ptrain report` will need --job", target.string(), e.what());
  }
}

}  // namespace ptrain::app
