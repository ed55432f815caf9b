// `ptrain report RUN_DIR|METRICS.jsonl [--job JOB.yaml] [--trace TRACE.json] [--out FILE]`: one
// self-contained HTML page of a run (inline SVG and CSS, no script, nothing fetched): loss and
// validation loss, tokens/s and MFU, step time and memory against validate's predictions, and the
// measured pipeline of a step beside the simulated schedule when the run wrote a trace.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/output_file.h"
#include "app/job_loading.h"
#include "app/report_charts.h"
#include "app/report_metrics.h"
#include "app/report_segments.h"
#include "app/report_stragglers.h"
#include "app/report_timeline.h"
#include "engine/io/input_file.h"
#include "engine/pipeline/render.h"
#include "engine/pipeline/schedule.h"
#include "engine/pipeline/simulator.h"
#include "engine/plan/step_time.h"

namespace ptrain::app {
namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::string path;  // a run directory or a metrics JSONL file
  JobArgs job;       // job_path empty: RUN_DIR/job.yaml when it exists
  std::string trace;
  std::string out;
};

struct Inputs {
  std::string metrics, job, trace, out;
};

// Where each input is: explicit flags first, then the run directory's own files.
Inputs locate(const ReportArgs& args) {
  Inputs in;
  const bool dir = fs::is_directory(args.path);
  const fs::path base = dir ? fs::path(args.path) : fs::path(args.path).parent_path();
  in.metrics = dir ? (base / "metrics.jsonl").string() : args.path;
  auto beside = [&](const std::string& given, const char* name) {
    if (!given.empty()) return given;
    const fs::path p = base / name;
    return fs::is_regular_file(p) ? p.string() : std::string();
  };
  in.job = beside(args.job.job_path, "job.yaml");
  in.trace = beside(args.trace, "trace.json");
  in.out = args.out.empty() ? (base / "report.html").string() : args.out;
  return in;
}

Series series(const RunMetrics& metrics, const char* key, std::string name, std::string color, double scale = 1.0) {
  return {std::move(name), std::move(color), metrics.curve(key, scale)};
}

// A summary figure with `digits` decimals; far outside a run's range (a metrics file written by
// hand) in %.4g, which stays short: %.4f printed 1e308 in 300 digits, which overflowed the line.
std::string summary_number(double v, int digits) {
  char text[64];
  if (std::isfinite(v) && std::abs(v) < 1e12)
    std::snprintf(text, sizeof text, "%.*f", digits, v);
  else
    std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// A step time to four significant digits, never in exponent form: a tiny job's 0.0001234 s is not
// 0.0001 s, and 12345 s is not 1.234e+04 s. "-" for what is not a time (NaN, infinite, negative).
std::string seconds_text(double s) {
  if (!std::isfinite(s) || s < 0) return "-";
  const int decimals = s > 0 ? std::clamp(3 - static_cast<int>(std::floor(std::log10(s))), 0, 12) : 0;
  char text[64];
  std::snprintf(text, sizeof text, "%.*f s", decimals, s);
  return text;
}

std::string strip_xml_prolog(std::string svg) {
  if (svg.rfind("<?xml", 0) == 0) svg.erase(0, svg.find('\n') + 1);
  return svg;
}

// The page's content is at most 1400 px wide; the timelines are drawn 1280 px wide, so that their
// 11 px text is shown at 11 px there (a narrower window scales them down).
constexpr double kTimelineWidth = 1280;

constexpr const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}.charts{display:flex;flex-wrap:wrap;gap:12px}
.chart .frame{fill:none;stroke:#999}.chart .grid{stroke:#eee}.chart .tick,.chart .legend{font-size:11px}
.chart .title{font-size:13px;font-weight:bold}.chart .axis{font-size:12px}.timelines{display:flex;flex-direction:column;gap:16px}
figure{margin:0}figure svg{max-width:100%;height:auto}
.note{color:#666;font-size:13px})";

int run_report(const ReportArgs& args) {
  const Inputs in = locate(args);
  if (refuse_output_over_input("--out", in.out, {{"the metrics", in.metrics}, {"the job", in.job},
                                                 {"the trace", in.trace}}) ||
      refuse_unwritable_output("--out", in.out))
    return kExitBadInput;
  const std::optional<RunMetrics> metrics = read_run_metrics(in.metrics);
  if (!metrics) return kExitBadInput;

  // Each segment's job: --job (and --set) for all, else as the run recorded it, else job.yaml.
  const std::optional<std::vector<SegmentJob>> jobs =
      segment_jobs(*metrics, args.job, args.job.job_path.empty() ? in.job : "", in.metrics);
  if (!jobs) return kExitBadInput;
  std::optional<nlohmann::json> trace;
  if (!in.trace.empty()) {
    std::string text;
    try {
      text = io::read_input_file(in.trace);
    } catch (const io::FileError& e) {
      std::fprintf(stderr, "error: cannot read the trace: %s\n", e.what());
      return kExitBadInput;
    }
    nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    if (parsed.is_discarded()) {
      std::fprintf(stderr, "error: %s is not a Chrome trace (JSON) as logging.trace writes it\n", in.trace.c_str());
      return kExitBadInput;
    }
    trace = std::move(parsed);
  }

  const LoadedJob* last = jobs->back().loaded.get();
  const std::string title = last ? last->job.spec.name : fs::path(in.metrics).parent_path().filename().string();
  const bool recorded = std::any_of(jobs->begin(), jobs->end(),
                                    [](const SegmentJob& s) { return s.loaded && !s.loaded->digest.empty(); });
  std::ostringstream page;
  page << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ptrain report: " << html_escape(title)
       << "</title><style>" << kStyle << "</style></head><body>\n<h1>ptrain report: " << html_escape(title) << "</h1>\n";
  page << "<table id=\"summary\"><tr><th>steps</th><td>" << metrics->last_step
       << "</td></tr><tr><th>last loss</th><td>" << summary_number(metrics->last_loss.value_or(std::nan("")), 4)
       << "</td></tr><tr><th>median tokens/s</th><td>" << summary_number(metrics->medians.at("tokens_per_s"), 0)
       << "</td></tr><tr><th>median MFU</th><td>" << summary_number(100 * metrics->medians.at("mfu"), 1)
       << "%</td></tr><tr><th>median step</th><td>" << seconds_text(metrics->medians.at("step_s")) << "</td></tr>";
  if (last && last->estimate)
    page << "<tr><th>validate's step</th><td>" << seconds_text(last->estimate->step_time_s) << "</td></tr>";
  if (jobs->size() > 1) page << "<tr><th>segments</th><td>" << jobs->size() << "</td></tr>";
  const std::string job_note = !args.job.job_path.empty() ? "; job " + html_escape(args.job.job_path) + " for every segment"
                               : recorded                  ? "; each segment's job as the run recorded it"
                               : in.job.empty()            ? "; no job file: no predictions (--job)"
                                                           : "; job " + html_escape(in.job);
  page << "</table>\n<p class=\"note\">metrics " << html_escape(in.metrics) << job_note
       << (in.trace.empty() ? "; no trace (logging.trace)" : "; trace " + html_escape(in.trace)) << "</p>\n";

  // Each segment's predictions over its own steps, and where each segment after the first begins.
  std::vector<Level> predicted_memory, predicted_step;
  std::vector<Boundary> boundaries;
  for (const SegmentJob& s : *jobs) {
    const double from = static_cast<double>(s.segment->first_step), to = static_cast<double>(s.segment->last_step);
    if (s.segment != &metrics->segments.front())
      boundaries.push_back({from - 0.5, "segment " + std::to_string(s.segment->number)});
    if (!s.loaded || !s.loaded->estimate) continue;
    const plan::Estimate& e = *s.loaded->estimate;
    predicted_step.push_back({from - 0.5, to + 0.5, e.step_time_s});
    for (const plan::RankEstimate& r : e.ranks)
      if (r.pp_rank == 0 && r.tp_rank == 0 && r.ep_rank == 0)
        predicted_memory.push_back({from - 0.5, to + 0.5, r.memory.total() / 1073741824.0});
  }
  if (jobs->size() > 1 || recorded) {
    page << "<h2>Segments</h2>\n<table id=\"segments\"><tr><th>segment</th><th>steps</th><th>started as</th>"
            "<th>layout</th><th>median step</th><th>validate's step</th><th>median MFU</th><th>median tokens/s</th></tr>";
    for (const SegmentJob& s : *jobs) {
      const RunSegment& seg = *s.segment;
      const std::string command = recorded_text(seg, "command");
      const std::string layout = recorded_text(seg, "layout");
      page << "<tr><td>" << seg.number << "</td><td>" << seg.first_step << "-" << seg.last_step << "</td><td>"
           << (command.empty() ? "(not recorded)" : "ptrain run " + html_escape(command)) << "</td><td>"
           << html_escape(layout) << "</td><td>" << seconds_text(seg.medians.at("step_s")) << "</td><td>"
           << (s.loaded && s.loaded->estimate ? seconds_text(s.loaded->estimate->step_time_s) : "-")
           << "</td><td>" << summary_number(100 * seg.medians.at("mfu"), 1) << "%</td><td>"
           << summary_number(seg.medians.at("tokens_per_s"), 0) << "</td></tr>";
    }
    page << "</table>\n";
  }
  page << "<h2>Training</h2>\n<div class=\"charts\">\n";
  page << line_chart({"Loss", "loss", {series(*metrics, "loss", "train", "#1f77b4"),
                                       series(*metrics, "val_loss", "validation", "#d62728")}, {}, "", boundaries});
  // Apart: a spike of the norm would flatten the learning rate on a shared axis.
  page << line_chart({"Learning rate", "lr", {series(*metrics, "lr", "lr", "#2ca02c")}, {}, "", boundaries});
  page << line_chart({"Gradient norm", "grad norm", {series(*metrics, "grad_norm", "grad norm", "#9467bd")}, {}, "",
                      boundaries});
  page << "</div>\n<h2>Speed</h2>\n<div class=\"charts\">\n";
  page << line_chart({"Tokens per second", "tokens/s", {series(*metrics, "tokens_per_s", "measured", "#1f77b4")}, {}, "",
                      boundaries});
  page << line_chart({"MFU", "%", {series(*metrics, "mfu", "measured", "#ff7f0e", 100.0)}, {}, "", boundaries});
  page << line_chart({"Step time", "seconds", {series(*metrics, "step_s", "measured", "#1f77b4")}, predicted_step,
                      "validate", boundaries});
  page << "</div>\n<h2>Memory (rank 0)</h2>\n<div class=\"charts\">\n";
  page << line_chart({"Memory", "GiB",
                      {series(*metrics, "memory_bytes", "allocated", "#1f77b4", 1.0 / 1073741824.0),
                       series(*metrics, "device_memory_peak_bytes", "device peak", "#d62728", 1.0 / 1073741824.0)},
                      predicted_memory, "validate", boundaries});
  page << "</div>\n";
  page << stragglers_section(*metrics, *jobs, boundaries);

  // The trace is drawn beside the segment whose job wrote it (the last of them): a trace a run left
  // in another layout, or another job's, is no picture of these steps. One that names no job (older
  // runs), or any with --job, is read with the last segment's job.
  page << "<h2>Pipeline</h2>\n";
  const SegmentJob* drawn = &jobs->back();
  const std::optional<std::string> digest = trace ? trace_job_digest(*trace) : std::nullopt;
  if (trace && digest && recorded && args.job.job_path.empty()) {
    drawn = nullptr;
    for (const SegmentJob& s : *jobs)
      if (s.loaded && s.loaded->digest == *digest) drawn = &s;
  }
  if (!trace || !drawn || !drawn->loaded) {
    page << "<p class=\"note\">"
         << (trace && !drawn ? html_escape(in.trace) + " was written by a job that trained none of these segments: not "
                                "drawn (a run writes its trace at its end; this one's job is not among the jobs the "
                                "metrics record)."
                             : "A run with logging.trace and its job file shows here its measured step beside the "
                               "simulated schedule.")
         << "</p>\n";
  } else {
    LoadedJob& job = *drawn->loaded;
    const config::JobSpec& spec = job.job.spec;
    const pipeline::Schedule schedule = pipeline::build(spec, spec.train.microbatches);
    std::optional<MeasuredStep> measured;
    try {
      measured = measured_step(*trace, spec.parallel.pp);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "error: %s is not a trace as logging.trace writes it: %s\n", in.trace.c_str(), e.what());
      return kExitBadInput;
    }
    const std::optional<plan::HardwareProfile> hw = find_job_hardware(job.job);
    const std::string segment =
        jobs->size() > 1 ? "segment " + std::to_string(drawn->segment->number) + ", " : std::string();
    if (!measured || !hw) {
      page << "<p class=\"note\">The trace holds no step that every pipeline stage recorded.</p>\n";
    } else {
      const pipeline::SimResult simulated = pipeline::simulate(schedule, plan::stage_op_costs(spec, *hw));
      // One time axis for both: the same px per second, so the longer step is drawn longer.
      const pipeline::SvgTimeAxis axis{std::max(measured->timeline.makespan, simulated.makespan), kTimelineWidth};
      auto four_digits = [](double seconds) {  // 4 significant digits: a step of microseconds too
        char text[32];
        std::snprintf(text, sizeof text, "%.4g", seconds);
        return std::string(text);
      };
      auto bubble = [](const pipeline::Bubble& b) {
        return "bubble " + summary_number(100 * b.fraction, 1) + "% (pp rank " + std::to_string(b.rank) +
               ", computing most)";
      };
      page << "<p class=\"note\">Both drawn on one time axis. The bubble is the idle time of the pp rank computing "
              "most, as validate defines it.</p>\n";
      page << "<div class=\"timelines\"><figure id=\"measured\"><figcaption>measured: step " << measured->step << " ("
           << segment << "tp 0, cp 0, dp 0), makespan " << four_digits(measured->timeline.makespan) << " s, "
           << bubble(measured->timeline.bubble) << "</figcaption>"
           << strip_xml_prolog(pipeline::render_svg(schedule, measured->timeline, axis)) << "</figure>\n";
      page << "<figure id=\"simulated\"><figcaption>simulated (validate's costs): makespan "
           << four_digits(simulated.makespan) << " s, " << bubble(simulated.bubble) << "</figcaption>"
           << strip_xml_prolog(pipeline::render_svg(schedule, simulated, axis)) << "</figure></div>\n";
    }
  }
  page << "</body></html>\n";

  if (!write_output_file(in.out, page.str())) return kExitRuntimeFailure;
  std::fprintf(stderr, "wrote %s\n", in.out.c_str());
  return kExitOk;
}

}  // namespace

void add_report_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "report",
      "Write one self-contained HTML page of a run: loss and validation loss, tokens/s and MFU, step time and\n"
      "memory against validate's predictions (with the job), and a step's measured pipeline beside the simulated\n"
      "schedule (with logging.trace). Reads RUN_DIR/metrics.jsonl, RUN_DIR/job.yaml and RUN_DIR/trace.json where\n"
      "the flags name none.");
  cmd->add_option("run", args->path, "A run directory, or the metrics JSONL file (logging.metrics)")->required();
  cmd->add_option("--job", args->job.job_path, "The run's job file (default: RUN_DIR/job.yaml if there)")
      ->check(non_empty());
  cmd->add_option("--set", args->job.overrides, "Override a job key as the run did, e.g. --set parallel.pp=2");
  cmd->add_option("--trace", args->trace, "The run's trace (default: RUN_DIR/trace.json if there)")
      ->check(non_empty());
  cmd->add_option("--out", args->out, "Where to write the page (default: RUN_DIR/report.html)")->check(non_empty());
  cmd->callback([args, &exit_code] { exit_code = run_report(*args); });
}

}  // namespace ptrain::app
