#include "engine/train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/file_io.h"
#include "engine/log/log.h"
#include "engine/train/record_file.h"
#include "engine/train/run_records.h"
#include "engine/train/tensorboard.h"

namespace ptrain::train {
namespace {

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}

// "step     12/100 | loss 4.1234 | ... | ETA 1m05s\n": the console line of a step.
std::string step_line(const StepMetrics& m, std::int64_t total_steps, double eta_seconds) {
  char text[512];
  const bool gib = m.memory_bytes >= 1073741824.0;
  const int n = std::snprintf(text, sizeof text,
                              "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | mem %.2f %s",
                              static_cast<long long>(m.step), static_cast<long long>(total_steps), m.loss, m.lr,
                              m.grad_norm, m.tokens_per_s, 100.0 * m.mfu,
                              m.memory_bytes / (gib ? 1073741824.0 : 1048576.0), gib ? "GiB" : "MiB");
  std::string line(text, static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(sizeof text) - 1)));
  if (m.pipeline_bubble) {
    std::snprintf(text, sizeof text, " | bubble %.1f%%", 100.0 * m.pipeline_bubble->fraction);
    line += text;
  }
  if (m.val_loss) {
    std::snprintf(text, sizeof text, " | val loss %.4f", *m.val_loss);
    line += text;
  }
  return line + " | ETA " + duration_text(eta_seconds) + "\n";
}

constexpr const char* kMetricsKey = "logging.metrics";

}  // namespace

const std::vector<StepScalar>& step_scalars() {
  using V = std::optional<double>;
  static const std::vector<StepScalar> scalars = {
      {"loss", "loss/train", [](const StepMetrics& m) -> V { return m.loss; }},
      {"lr", "optimizer/lr", [](const StepMetrics& m) -> V { return m.lr; }},
      {"grad_norm", "optimizer/grad_norm", [](const StepMetrics& m) -> V { return m.grad_norm; }},
      {"tokens_per_s", "throughput/tokens_per_s", [](const StepMetrics& m) -> V { return m.tokens_per_s; }},
      {"mfu", "throughput/mfu", [](const StepMetrics& m) -> V { return m.mfu; }},
      {"step_s", "time/step_s", [](const StepMetrics& m) -> V { return m.step_seconds; }},
      {"memory_bytes", "memory/bytes", [](const StepMetrics& m) -> V { return m.memory_bytes; }},
      {"device_memory_peak_bytes", "memory/device_peak_bytes",
       [](const StepMetrics& m) -> V { return m.device_memory_peak_bytes; }},
      {"val_loss", "loss/validation", [](const StepMetrics& m) -> V { return m.val_loss; }},
      {"pipeline_idle", "pipeline/idle",
       [](const StepMetrics& m) -> V { return m.pipeline_bubble ? V(m.pipeline_bubble->fraction) : std::nullopt; }},
      {"pipeline_bubble_s", "pipeline/bubble_s",
       [](const StepMetrics& m) -> V { return m.pipeline_bubble ? V(m.pipeline_bubble->seconds) : std::nullopt; }},
      {"pipeline_bubble_rank", "pipeline/bubble_rank",
       [](const StepMetrics& m) -> V { return m.pipeline_bubble ? V(m.pipeline_bubble->rank) : std::nullopt; }},
      {"optimizer_s", "time/optimizer_s", [](const StepMetrics& m) -> V { return m.optimizer_seconds; }},
      {"compute_s", "time/compute_s", [](const StepMetrics& m) -> V { return m.compute_seconds; }},
      {"slowest_rank", "stragglers/slowest_rank",
       [](const StepMetrics& m) -> V { return m.slowest_rank ? V(m.slowest_rank->rank) : std::nullopt; }},
      {"slowest_rank_s", "stragglers/slowest_rank_s",
       [](const StepMetrics& m) -> V { return m.slowest_rank ? V(m.slowest_rank->seconds) : std::nullopt; }},
      {"median_rank_s", "stragglers/median_rank_s",
       [](const StepMetrics& m) -> V { return m.slowest_rank ? V(m.slowest_rank->median_seconds) : std::nullopt; }},
      {"slowest_rank_ratio", "stragglers/slowest_rank_ratio",
       [](const StepMetrics& m) -> V { return m.slowest_rank ? V(m.slowest_rank->ratio()) : std::nullopt; }},
  };
  return scalars;
}

const std::vector<StepPerAxis>& step_per_axis() {
  static const std::vector<StepPerAxis> fields = {{"comm_bytes", "comm/bytes/", &StepMetrics::comm_bytes},
                                                  {"comm_s", "time/comm_s/", &StepMetrics::comm_seconds}};
  return fields;
}

MetricsLog::MetricsLog(const std::string& jsonl_path, const std::string& tensorboard_dir, std::int64_t total_steps,
                       std::int64_t log_every)
    : tensorboard_dir_(tensorboard_dir),
      total_steps_(total_steps),
      log_every_(log_every > 0 ? log_every : 1),
      // A person at a terminal: stdout and stderr both on it. (mpirun hands its ranks' stdout a
      // pseudo-terminal, but stderr a pipe: no bar in its output.)
      tty_(isatty(STDOUT_FILENO) != 0 && isatty(STDERR_FILENO) != 0) {
  if (jsonl_path.empty()) return;
  jsonl_ = std::make_unique<RecordFile>(kMetricsKey, jsonl_path);
  jsonl_path_ = jsonl_path;
}

void MetricsLog::start_segment(std::int64_t step, nlohmann::ordered_json segment) {
  const std::string command = segment.value("command", std::string());
  if (!tensorboard_dir_.empty()) {
    const bool continued = holds_event_files(tensorboard_dir_);
    tensorboard_ = std::make_unique<TensorBoardLog>(tensorboard_dir_);
    if (continued) tensorboard_->mark_restart(step + 1, "ptrain run " + command + " (after step " + std::to_string(step) + ")");
  }
  std::int64_t number = 1;  // the new segment's
  if (jsonl_) {
    std::ifstream in(jsonl_path_);
    std::string kept, line;
    std::int64_t dropped_from = 0, dropped_to = 0, last_number = 0;
    bool rewrite = false, kept_rows = false;
    while (std::getline(in, line)) {
      const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
      const bool is_row = row.is_object() && row.contains("step") && row["step"].is_number_integer();
      const std::int64_t row_step = is_row ? row["step"].get<std::int64_t>() : 0;
      if (is_row && row_step > step) {
        rewrite = true;
        dropped_from = dropped_from == 0 ? row_step : std::min(dropped_from, row_step);
        dropped_to = std::max(dropped_to, row_step);
      } else {
        kept += line + "\n";
        if (is_row) {
          kept_rows = true;
          if (row.contains("segment") && row["segment"].is_object() && row["segment"].contains("number") &&
              row["segment"]["number"].is_number_integer())
            last_number = row["segment"]["number"].get<std::int64_t>();
        }
      }
      if (in.eof()) rewrite = true;  // a last line without its newline (cut short): the next row would join it
    }
    number = kept_rows ? std::max<std::int64_t>(last_number, 1) + 1 : 1;
    if (rewrite) {
      jsonl_.reset();
      ckpt::write_file_atomically(jsonl_path_, kept);  // a crash now leaves the old file or the new one
      try {
        jsonl_ = std::make_unique<RecordFile>(kMetricsKey, jsonl_path_);
      } catch (const std::invalid_argument& e) {  // it opened a moment ago: a failure now is no bad input
        throw std::runtime_error(e.what());
      }
    }
    if (dropped_to > 0)
      note("records: " + jsonl_path_ + ": the rows of steps " + std::to_string(dropped_from) + "-" +
           std::to_string(dropped_to) + " are dropped, as this run trains them again");
    if (number > 1)
      note("records: " + jsonl_path_ + " goes on after step " + std::to_string(step) + " as segment " +
           std::to_string(number) + " (`ptrain report` marks where it begins)");
  }
  nlohmann::ordered_json record = {{"number", number}, {"after_step", step}};
  for (auto& [key, value] : segment.items()) record[key] = value;
  segment_ = std::move(record);
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::close() {
  for (RecordFile* file : {jsonl_.get(), tensorboard_ ? &tensorboard_->file() : nullptr}) {
    try {
      if (file != nullptr) file->close();
    } catch (const RecordWriteError& e) {
      if (!failure_) failure_ = e.what();
    }
  }
}

void MetricsLog::write_records(const StepMetrics& m) {
  if (tensorboard_) tensorboard_->record(m);
  if (!jsonl_) return;
  nlohmann::ordered_json j = {{"step", m.step}};
  for (const StepScalar& f : step_scalars())
    if (const std::optional<double> v = f.value(m)) j[f.key] = *v;
  for (const StepPerAxis& f : step_per_axis()) {
    const std::optional<PerAxis>& a = m.*f.member;
    if (!a) continue;
    nlohmann::ordered_json axes;
    for (const AxisField& axis : kAxes) axes[axis.name] = (*a).*axis.member;
    j[f.key] = axes;
  }
  if (segment_) j["segment"] = *segment_;  // the segment's first row: its boundary
  jsonl_->append(j.dump() + "\n", "the row of step " + std::to_string(m.step));
  segment_.reset();  // carried by this row
}

void MetricsLog::record(const StepMetrics& m, double eta_seconds, bool last) {
  try {
    if (!failure_) write_records(m);  // after a lost record, none: the files end before it
  } catch (const RecordWriteError& e) {
    failure_ = e.what();
  }
  const bool due = m.step % log_every_ == 0 || last || m.val_loss.has_value();
  if (due) {
    // An output, not a log (engine/log): on stdout, built whole and written at once, so that no
    // other thread's line lands inside it.
    const std::string line = (bar_visible_ ? "\r\033[K" : "") + step_line(m, total_steps_, eta_seconds);
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
    bar_visible_ = false;
  }
  if (tty_ && !last) draw_progress(m.step, eta_seconds);
}

void MetricsLog::note(const std::string& line) { log::train().info(line); }

void MetricsLog::draw_progress(std::int64_t step, double eta_seconds) {
  constexpr int kWidth = 40;
  const double done = total_steps_ > 0 ? static_cast<double>(step) / static_cast<double>(total_steps_) : 1.0;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '-');
  std::printf("\r[%s] %5.1f%% ETA %s", bar.c_str(), 100.0 * done, duration_text(eta_seconds).c_str());
  bar_visible_ = true;  // until the next line clears it (the last step draws none)
  std::fflush(stdout);
}

std::runtime_error records_lost_error(const MetricsLog* log, const std::string& checkpoint_dir,
                                      std::int64_t last_saved_step, std::int64_t steps_done) {
  if (log == nullptr || !log->failure())
    return std::runtime_error("rank 0 could not write the run's records (its error says which and why)");
  const std::string checkpoint = ckpt::join_path(checkpoint_dir, ckpt::step_dir_name(last_saved_step));
  std::string kept;
  if (checkpoint_dir.empty())
    kept = "without checkpoint.dir no step of this run is kept";
  else if (last_saved_step <= 0)
    kept = "no checkpoint was saved: the next run starts from the beginning";
  else if (last_saved_step >= steps_done)
    kept = "the checkpoint " + checkpoint + " holds every step trained";
  else
    kept = "the steps after step " + std::to_string(last_saved_step) +
           " are lost; the next run resumes from " + checkpoint + " and trains them again";
  return std::runtime_error(*log->failure() + ". The run stops, saving no checkpoint after the loss: " +
                            kept);
}

}  // namespace ptrain::train
