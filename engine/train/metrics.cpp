#include "engine/train/metrics.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/ckpt/file_io.h"
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

}  // namespace

MetricsLog::MetricsLog(const std::string& jsonl_path, const std::string& tensorboard_dir, std::int64_t total_steps,
                       std::int64_t log_every)
    : total_steps_(total_steps), log_every_(log_every > 0 ? log_every : 1), tty_(isatty(STDERR_FILENO) != 0) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardLog>(tensorboard_dir);
  if (jsonl_path.empty()) return;
  std::error_code ignored;  // a failure to create the folder shows up as the open failing
  const std::filesystem::path parent = std::filesystem::path(jsonl_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  jsonl_.open(jsonl_path, std::ios::app);
  if (!jsonl_) throw std::invalid_argument("logging.metrics: cannot open '" + jsonl_path + "' for writing");
  jsonl_path_ = jsonl_path;
}

void MetricsLog::start_after(std::int64_t step) {
  if (!jsonl_.is_open()) return;
  std::ifstream in(jsonl_path_);
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    const bool later = row.is_object() && row.contains("step") && row["step"].is_number_integer() &&
                       row["step"].get<std::int64_t>() > step;
    if (later) dropped = true;
    else kept += line + "\n";
  }
  if (!dropped) return;
  jsonl_.close();
  ckpt::write_file_atomically(jsonl_path_, kept);  // a crash now leaves the old file or the new one
  jsonl_.open(jsonl_path_, std::ios::app);
  if (!jsonl_) throw std::runtime_error("logging.metrics: cannot reopen '" + jsonl_path_ + "'");
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::record(const StepMetrics& m, double eta_seconds) {
  if (tensorboard_) tensorboard_->record(m);
  if (jsonl_.is_open()) {
    nlohmann::ordered_json j = {{"step", m.step},           {"loss", m.loss}, {"lr", m.lr},
                                {"grad_norm", m.grad_norm}, {"tokens_per_s", m.tokens_per_s}, {"mfu", m.mfu},
                                {"step_s", m.step_seconds}, {"memory_bytes", m.memory_bytes}};
    if (m.device_memory_peak_bytes) j["device_memory_peak_bytes"] = *m.device_memory_peak_bytes;
    if (m.val_loss) j["val_loss"] = *m.val_loss;
    if (m.pipeline_idle) j["pipeline_idle"] = *m.pipeline_idle;
    auto per_axis = [](const PerAxis& a) {
      return nlohmann::ordered_json{{"tp", a.tp}, {"pp", a.pp}, {"dp", a.dp}, {"cp", a.cp}, {"ep", a.ep}};
    };
    if (m.comm_bytes) j["comm_bytes"] = per_axis(*m.comm_bytes);
    if (m.comm_seconds) j["comm_s"] = per_axis(*m.comm_seconds);
    j["optimizer_s"] = m.optimizer_seconds;
    j["compute_s"] = m.compute_seconds;
    jsonl_ << j.dump() << '\n';
    jsonl_.flush();
  }
  const bool due = m.step % log_every_ == 0 || m.step == total_steps_ || m.val_loss.has_value();
  if (due) {
    if (bar_visible_) std::fputs("\r\033[K", stderr);
    const bool gib = m.memory_bytes >= 1073741824.0;
    std::fprintf(stderr, "step %6lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %.1f%% | mem %.2f %s",
                 static_cast<long long>(m.step), static_cast<long long>(total_steps_), m.loss, m.lr, m.grad_norm,
                 m.tokens_per_s, 100.0 * m.mfu, m.memory_bytes / (gib ? 1073741824.0 : 1048576.0), gib ? "GiB" : "MiB");
    if (m.pipeline_idle) std::fprintf(stderr, " | pipeline idle %.1f%%", 100.0 * *m.pipeline_idle);
    if (m.val_loss) std::fprintf(stderr, " | val loss %.4f", *m.val_loss);
    std::fprintf(stderr, " | ETA %s\n", duration_text(eta_seconds).c_str());
    bar_visible_ = false;
  }
  if (tty_) draw_progress(m.step, eta_seconds);
}

void MetricsLog::note(const std::string& line) {
  if (bar_visible_) std::fputs("\r\033[K", stderr);
  bar_visible_ = false;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void MetricsLog::draw_progress(std::int64_t step, double eta_seconds) {
  constexpr int kWidth = 40;
  const double done = total_steps_ > 0 ? static_cast<double>(step) / static_cast<double>(total_steps_) : 1.0;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '-');
  std::fprintf(stderr, "\r[%s] %5.1f%% ETA %s", bar.c_str(), 100.0 * done, duration_text(eta_seconds).c_str());
  std::fflush(stderr);
  bar_visible_ = step < total_steps_;
  if (!bar_visible_) std::fputs("\r\033[K", stderr);
}

}  // namespace ptrain::train
