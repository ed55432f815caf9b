#include "engine/train/run_records.h"

#include <cinttypes>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "engine/ckpt/crc32c.h"
#include "engine/train/metrics.h"

namespace ptrain::train {
namespace {

namespace fs = std::filesystem;

// A path as the records name it: absolute, links resolved ("" for none), so that the same directory
// reached from another working directory is the same.
fs::path canonical_path(const std::string& path) {
  if (path.empty()) return {};
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : canonical;
}

// checkpoint.dir from the folder of logging.metrics ("ckpt" for runs/x/ckpt beside
// runs/x/metrics.jsonl): what stays the same when a run's directory is moved or copied whole.
std::string beside_metrics(const config::JobSpec& spec) {
  if (spec.checkpoint.dir.empty() || spec.logging.metrics.empty()) return "";
  return canonical_path(spec.checkpoint.dir)
      .lexically_relative(canonical_path(spec.logging.metrics).parent_path())
      .string();
}

std::string text_field(const nlohmann::json& object, const char* key) {
  return object.contains(key) && object[key].is_string() ? object[key].get<std::string>() : "";
}

std::string layout_text(const config::JobSpec& spec) {
  const config::ParallelSpec& p = spec.parallel;
  char text[256];
  std::snprintf(text, sizeof text, "tp %d, pp %d, cp %d, dp %d, ep %d, zero %d, %s", p.tp, p.pp, p.cp, p.dp, p.ep, p.zero,
                config::to_string(spec.schedule.kind));
  std::string out = text;
  if (spec.schedule.virtual_stages > 1) out += " x" + std::to_string(spec.schedule.virtual_stages);
  return out + ", micro_batch " + std::to_string(spec.train.micro_batch);
}

// What a metrics file holds, read without parsing every row: whether it has rows, the steps of its
// first and last, and the last "segment" record (the run that wrote it last).
struct HeldRows {
  bool any = false;
  std::int64_t first_step = 0, last_step = 0;
  std::optional<nlohmann::json> segment;
};

std::optional<std::int64_t> row_step(const std::string& line) {
  const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
  if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer()) return std::nullopt;
  return row["step"].get<std::int64_t>();
}

HeldRows held_rows(const std::string& path) {
  HeldRows held;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return held;  // none yet (a FIFO is refused as an output elsewhere)
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (!held.any)
      if (const auto step = row_step(line)) held.any = true, held.first_step = *step;
    if (line.find("\"segment\"") != std::string::npos) {
      const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
      if (row.is_object() && row.contains("segment") && row["segment"].is_object()) held.segment = row["segment"];
    }
    last = std::move(line);
  }
  if (const auto step = held.any ? row_step(last) : std::nullopt) held.last_step = *step;
  return held;
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// How a refused run gets records of its own: a metrics file beside its checkpoint.dir, where that is
// another path than the one refused.
std::string own_records_fix(const config::JobSpec& spec) {
  std::string fix = "give this run records of its own";
  const std::string& metrics = spec.logging.metrics;
  if (!spec.checkpoint.dir.empty() && !metrics.empty()) {
    const fs::path beside = fs::path(spec.checkpoint.dir).lexically_normal().parent_path() /
                            fs::path(metrics).filename();
    if (beside.lexically_normal() != fs::path(metrics).lexically_normal())
      fix += " (--set logging.metrics=" + beside.string() + ")";
  }
  return fix + ", with logging.trace and logging.tensorboard beside it; or move the old records away first";
}

}  // namespace

std::string job_digest(const std::string& job_yaml) {
  char text[16];
  std::snprintf(text, sizeof text, "%08" PRIx32, ckpt::crc32c(job_yaml.data(), job_yaml.size()));
  return text;
}

nlohmann::ordered_json segment_record(const config::JobSpec& spec, const RunSegmentSource& source) {
  return {{"command", source.command},
          {"checkpoint_dir", canonical_path(spec.checkpoint.dir).string()},
          {"checkpoint_dir_from_metrics", beside_metrics(spec)},
          {"world", spec.world},
          {"layout", layout_text(spec)},
          {"job_digest", job_digest(source.job_yaml)},
          {"job", source.job_yaml}};
}

bool holds_event_files(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) return true;
  return false;
}

std::optional<RecordsRefusal> refuse_records(const config::JobSpec& spec, std::int64_t resume_step) {
  const std::string own = canonical_path(spec.checkpoint.dir).string();
  const std::string fix = own_records_fix(spec);
  const std::string starting = resume_step > 0 ? "resumes from step " + std::to_string(resume_step)
                                               : "starts from the beginning";
  const std::string& metrics = spec.logging.metrics;
  if (!metrics.empty()) {
    const HeldRows held = held_rows(metrics);
    if (held.any) {
      const std::string steps = "steps " + std::to_string(held.first_step) + "-" + std::to_string(held.last_step);
      if (held.segment) {
        const nlohmann::json& s = *held.segment;
        // This run's own (the same checkpoint.dir, or the same beside the metrics: the run's folder
        // moved or copied whole): it goes on with them.
        const std::string theirs = text_field(s, "checkpoint_dir");
        const std::string theirs_beside = text_field(s, "checkpoint_dir_from_metrics");
        if (!own.empty() && (theirs == own || (!theirs_beside.empty() && theirs_beside == beside_metrics(spec))))
          return std::nullopt;
        const std::string command =
            text_field(s, "command").empty() ? "a run" : "`ptrain run " + text_field(s, "command") + "`";
        return RecordsRefusal{
            "logging.metrics",
            quoted(metrics) + " holds the records of another run: " + steps + " of " + command + " (" +
                (theirs.empty() ? "without checkpoint.dir" : "checkpoint.dir " + theirs) + "); this run (" +
                (own.empty() ? "without checkpoint.dir" : "checkpoint.dir " + own) + ") " + starting +
                " and would write over them",
            fix + (theirs.empty() ? "" : "; to continue that run, resume it from checkpoint.dir " + theirs)};
      }
      if (resume_step > 0) return std::nullopt;  // rows that name no run: a resumed run continues them
      return RecordsRefusal{"logging.metrics",
                            quoted(metrics) + " holds " + steps + " of an earlier run that names no checkpoint.dir; " +
                                "this run " + starting + " and would write over them",
                            fix};
    }
  }
  // No metrics rows to name the run: a trace or TensorBoard events go on with a resumed run only.
  if (resume_step > 0) return std::nullopt;
  if (!spec.logging.tensorboard.empty() && holds_event_files(spec.logging.tensorboard))
    return RecordsRefusal{"logging.tensorboard",
                          quoted(spec.logging.tensorboard) + " holds the events of an earlier run; this run " +
                              starting + ": TensorBoard would show its steps mixed with them",
                          fix};
  std::error_code ec;
  if (!spec.logging.trace.empty() && fs::is_regular_file(spec.logging.trace, ec) &&
      fs::file_size(spec.logging.trace, ec) > 0)
    return RecordsRefusal{"logging.trace",
                          quoted(spec.logging.trace) + " holds the trace of an earlier run; this run " + starting +
                              " and would replace it",
                          fix};
  return std::nullopt;
}

void start_run_records(const config::JobSpec& spec, dist::Comm& comm, MetricsLog* log, std::int64_t resume_step,
                       const RunSegmentSource& source) {
  std::string failure;  // "2" + a refusal (bad input), "1" + another failure
  std::exception_ptr own;
  if (comm.rank() == 0) {
    try {
      if (const std::optional<RecordsRefusal> refusal = refuse_records(spec, resume_step))
        throw std::invalid_argument(refusal->text());
      if (log != nullptr) log->start_segment(resume_step, segment_record(spec, source));
    } catch (const std::invalid_argument& e) {
      own = std::current_exception();
      failure = std::string("2") + e.what();
    } catch (const std::exception& e) {
      own = std::current_exception();
      failure = std::string("1") + e.what();
    }
  }
  comm.broadcast_string(comm.world_group(), failure, 0);
  if (own) std::rethrow_exception(own);
  if (failure.empty()) return;
  if (failure[0] == '2') throw std::invalid_argument(failure.substr(1));
  throw std::runtime_error("rank 0 could not open the run's records: " + failure.substr(1));
}

}  // namespace ptrain::train
