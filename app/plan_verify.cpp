#include "app/plan_verify.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "app/exit_codes.h"
#include "app/worker_process.h"
#include "engine/config/yaml_edit.h"
#include "engine/train/typical_step.h"

namespace ptrain::app {
namespace {

namespace fs = std::filesystem;

// A scratch directory removed when the verification ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::random_device seed;
    path_ = fs::temp_directory_path() / ("ptrain-verify-" + std::to_string(::getpid()) + "-" + std::to_string(seed()));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// `ptrain run <job>` as a child with its output in `log`; its exit status.
int run_child(const std::string& job, const std::string& log) {
  const std::string self = self_executable();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("cannot start a run (fork failed)");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    ::execl(self.c_str(), self.c_str(), "run", job.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("lost the run's process");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The run's typical step (train::StepRecord: the median after its first two steps).
std::optional<double> median_step(const std::string& metrics) {
  std::ifstream in(metrics);
  train::StepRecord record;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step_s") || !j["step_s"].is_number()) continue;
    train::StepMetrics m;
    m.step_seconds = j["step_s"].get<double>();
    record.add(m);
  }
  const std::optional<train::TypicalStep> typical = record.typical();
  return typical ? std::optional<double>(typical->step_s) : std::nullopt;
}

std::string last_error_line(const std::string& log) {
  std::ifstream in(log);
  std::string last, line;
  while (std::getline(in, line))
    if (line.find("error") != std::string::npos) last = line;
  return last.empty() ? "see its output" : last;
}

}  // namespace

std::vector<VerifiedLayout> verify_layouts(const std::string& yaml, const std::vector<std::string>& keys,
                                           const std::vector<plan::RankedLayout>& ranked, int k, bool experts,
                                           int steps, int rounds) {
  const ScratchDir scratch;
  std::vector<VerifiedLayout> rows;
  const int count = std::min<int>(k, static_cast<int>(ranked.size()));
  for (int row = 1; row <= count; ++row) {
    const plan::RankedLayout& layout = ranked[static_cast<std::size_t>(row - 1)];
    const std::string base = (scratch.path() / ("row" + std::to_string(row))).string();
    std::vector<std::string> assignments = keys;
    for (const std::string& key : plan::layout_assignments(layout.layout, experts)) assignments.push_back(key);
    for (const std::string& key : std::vector<std::string>{
             "train.steps=" + std::to_string(steps), "logging.metrics=" + base + ".jsonl",
             "logging.every=" + std::to_string(steps), "logging.trace=null", "logging.tensorboard=null",
             "checkpoint.dir=null", "data.eval_every=0"})
      assignments.push_back(key);
    std::ofstream job(base + ".yaml");
    job << config::yaml_with_values(yaml, assignments);
    VerifiedLayout v;
    v.row = row;
    v.predicted_s = layout.estimate.step_time_s;
    rows.push_back(std::move(v));
  }
  for (int round = 1; round <= rounds; ++round) {
    for (VerifiedLayout& v : rows) {
      if (!v.failure.empty()) continue;
      const std::string base = (scratch.path() / ("row" + std::to_string(v.row))).string();
      std::fprintf(stderr, "verify: running row %d (%d steps, round %d of %d)\n", v.row, steps, round, rounds);
      std::error_code ignored;
      fs::remove(base + ".jsonl", ignored);
      if (const int code = run_child(base + ".yaml", base + ".log"); code != 0) {
        v.failure = "exit " + std::to_string(code) + ": " + last_error_line(base + ".log");
        v.exit_code = code;
      } else if (const std::optional<double> step = median_step(base + ".jsonl")) {
        v.round_s.push_back(*step);
      } else {
        v.failure = "no step was recorded";
      }
    }
  }
  for (VerifiedLayout& v : rows) {
    if (!v.failure.empty() || v.round_s.empty()) continue;
    std::vector<double> sorted = v.round_s;
    std::sort(sorted.begin(), sorted.end());
    const std::size_t n = sorted.size();
    v.measured_s = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }
  return rows;
}

int verify_exit_code(const std::vector<VerifiedLayout>& rows) {
  if (std::any_of(rows.begin(), rows.end(), [](const VerifiedLayout& v) { return v.measured_s.has_value(); }))
    return kExitOk;
  const bool bad_input = !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const VerifiedLayout& v) {
    return v.exit_code == kExitBadInput;
  });
  return bad_input ? kExitBadInput : kExitRuntimeFailure;
}

std::optional<double> choice_over_fastest(const std::vector<VerifiedLayout>& rows) {
  if (rows.empty() || !rows.front().measured_s) return std::nullopt;
  const VerifiedLayout* fastest = &rows.front();
  for (const VerifiedLayout& v : rows)
    if (v.measured_s && *v.measured_s < *fastest->measured_s) fastest = &v;
  if (fastest == &rows.front()) return 1.0;
  std::vector<double> ratios;
  for (std::size_t r = 0; r < std::min(rows.front().round_s.size(), fastest->round_s.size()); ++r)
    ratios.push_back(rows.front().round_s[r] / fastest->round_s[r]);
  std::sort(ratios.begin(), ratios.end());
  const std::size_t n = ratios.size();
  return n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
}

std::string verify_table(const std::vector<VerifiedLayout>& rows) {
  std::string out = "verify: the top " + std::to_string(rows.size()) + " layouts run on this machine\n";
  out += "  #  predicted   measured  measured/predicted  rounds\n";
  const VerifiedLayout* fastest = nullptr;
  for (const VerifiedLayout& v : rows) {
    char line[256];
    if (v.measured_s) {
      const auto [low, high] = std::minmax_element(v.round_s.begin(), v.round_s.end());
      std::snprintf(line, sizeof line, "%3d  %7.4f s  %7.4f s  %6.2fx              %.4f-%.4f s\n", v.row,
                    v.predicted_s, *v.measured_s, *v.measured_s / v.predicted_s, *low, *high);
      if (fastest == nullptr || *v.measured_s < *fastest->measured_s) fastest = &v;
    } else {
      std::snprintf(line, sizeof line, "%3d  %7.4f s  failed: %s\n", v.row, v.predicted_s, v.failure.c_str());
    }
    out += line;
  }
  if (fastest == nullptr) return out + "no layout ran\n";
  if (fastest->row == 1 || rows.front().measured_s == std::nullopt) {
    out += "fastest measured: row " + std::to_string(fastest->row) +
           (fastest->row == 1 ? ", the plan's choice\n" : "\n");
    return out;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "fastest measured: row %d; the plan's choice (row 1) took %.1f%% longer (median of the rounds' "
                "ratios)\n",
                fastest->row, 100 * (*choice_over_fastest(rows) - 1));
  return out + line;
}

}  // namespace ptrain::app
