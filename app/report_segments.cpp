#include "app/report_segments.h"

#include <algorithm>
#include <map>

#include "engine/train/run_records.h"

namespace ptrain::app {
namespace {

std::shared_ptr<LoadedJob> load_given(const JobArgs& args) {
  auto loaded = std::make_shared<LoadedJob>();
  loaded->job = load_job(args, std::nullopt);
  if (loaded->job.ok()) loaded->estimate = estimate_job(loaded->job);
  return loaded;
}

}  // namespace

std::string recorded_text(const RunSegment& segment, const char* key) {
  if (!segment.record || !segment.record->contains(key) || !(*segment.record)[key].is_string()) return "";
  return (*segment.record)[key].get<std::string>();
}

std::optional<std::vector<SegmentJob>> segment_jobs(const RunMetrics& metrics, const JobArgs& given,
                                                    const std::string& beside, const std::string& metrics_path) {
  const bool recorded = std::any_of(metrics.segments.begin(), metrics.segments.end(),
                                    [](const RunSegment& s) { return !recorded_text(s, "job").empty(); });
  std::shared_ptr<LoadedJob> common;  // --job, or job.yaml for a run that recorded none
  if (!given.job_path.empty() || (!recorded && !beside.empty())) {
    JobArgs args = given;
    if (args.job_path.empty()) args.job_path = beside;
    common = load_given(args);
    print_diagnostics(common->job.diags);
    if (!common->job.ok()) return std::nullopt;
  }
  std::map<std::string, std::shared_ptr<LoadedJob>> by_text;  // a job loaded and estimated once
  std::vector<SegmentJob> out;
  for (const RunSegment& segment : metrics.segments) {
    SegmentJob s{&segment, common};
    const std::string text = recorded_text(segment, "job");
    if (!common && !text.empty()) {
      std::shared_ptr<LoadedJob>& loaded = by_text[text];
      if (!loaded) {
        loaded = std::make_shared<LoadedJob>();
        config::LoadOptions options;
        options.overrides = given.overrides;
        const std::string origin = metrics_path + " (segment " + std::to_string(segment.number) + "'s job)";
        loaded->job = config::load_string(text, origin, options);
        check_environment(loaded->job.diags);
        if (loaded->job.ok()) loaded->estimate = estimate_job(loaded->job);
        loaded->digest = train::job_digest(text);
        print_diagnostics(loaded->job.diags);
        if (!loaded->job.ok()) return std::nullopt;
      }
      s.loaded = loaded;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ptrain::app
