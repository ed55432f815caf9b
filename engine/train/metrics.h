// What a step reports: the console line every logging.every steps on stdout (with a progress bar
// when stdout and stderr are a terminal) and one JSON object per step in logging.metrics (JSONL).
// The line is an output, not a log (engine/log): it stays as it is under any PTRAIN_LOG_LEVEL.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/pipeline/simulator.h"
#include "engine/train/stragglers.h"

namespace ptrain::train {

// A value per parallelism axis in a step, the most over the ranks: the bytes a rank sent over each
// axis's groups by the plan's convention (plan::bytes_sent; what validate reports as
// comm_bytes_per_step), or the seconds it spent inside their calls.
struct PerAxis {
  double tp = 0, pp = 0, dp = 0, cp = 0, ep = 0;
  PerAxis operator-(const PerAxis& o) const {
    return {tp - o.tp, pp - o.pp, dp - o.dp, cp - o.cp, ep - o.ep};
  }
  PerAxis& operator+=(const PerAxis& o) {
    return *this = {tp + o.tp, pp + o.pp, dp + o.dp, cp + o.cp, ep + o.ep};
  }
  double total() const { return tp + pp + dp + cp + ep; }
};

struct StepMetrics {
  std::int64_t step = 0;  // 1-based: the step just completed
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double step_seconds = 0;
  double memory_bytes = 0;  // parameters, gradients, optimizer state and activation arena
  // The most device memory in use after any step so far (Ops::device_bytes_in_use), where measured.
  std::optional<double> device_memory_peak_bytes;
  std::optional<double> val_loss;
  // pp > 1: the pipeline's bubble, measured (train/step_accounting.h) as validate predicts it
  // (pipeline/simulator.h: the idle time of the pp rank computing most).
  std::optional<pipeline::Bubble> pipeline_bubble;
  // world > 1: the bytes sent since the previous step's report (ZeRO's parameter gathers after an
  // update count in the next step), and the seconds spent inside the calls that sent them
  // (blocking ones whole; an overlapped reduction only while it is issued).
  std::optional<PerAxis> comm_bytes, comm_seconds;
  double optimizer_seconds = 0;  // the slowest rank's update, outside its collective calls
  // The forward and backward outside any collective, on the rank with the most of it (its
  // pipeline phase less the seconds inside its own calls).
  double compute_seconds = 0;
  // The rank whose compute was the largest multiple of the median of its pipeline stage's ranks
  // (train/stragglers.h); one rank: itself, ratio 1.
  std::optional<SlowestRank> slowest_rank;
};

// The step's metrics by name, the one list that the metrics JSONL, TensorBoard and `report` read:
// each scalar's JSONL key, its TensorBoard tag, and its value (none where the step has none).
struct StepScalar {
  const char* key;
  const char* tag;
  std::optional<double> (*value)(const StepMetrics&);
};
const std::vector<StepScalar>& step_scalars();
// The per-axis ones: a JSON object {"tp", "pp", "dp", "cp", "ep"} in the JSONL, a tag per axis
// (tag_prefix + axis) in TensorBoard.
struct StepPerAxis {
  const char* key;
  const char* tag_prefix;
  std::optional<PerAxis> StepMetrics::*member;
};
const std::vector<StepPerAxis>& step_per_axis();
struct AxisField {
  const char* name;
  double PerAxis::*member;
};
inline constexpr AxisField kAxes[] = {
    {"tp", &PerAxis::tp}, {"pp", &PerAxis::pp}, {"dp", &PerAxis::dp}, {"cp", &PerAxis::cp}, {"ep", &PerAxis::ep}};

class TensorBoardLog;
class RecordFile;

class MetricsLog {
 public:
  // Opens (appends to) the JSONL file if `jsonl_path` is not empty; throws std::invalid_argument
  // naming the key if it cannot be opened. The TensorBoard event file in `tensorboard_dir` (if not
  // empty) is opened by start_segment, once the run may write there (run_records.h).
  MetricsLog(const std::string& jsonl_path, const std::string& tensorboard_dir, std::int64_t total_steps,
             std::int64_t log_every);
  ~MetricsLog();
  // Records a step: JSONL and TensorBoard always, the console line every log_every steps and at the
  // run's last step (`last`: the end of training, --stop-after-steps, a stop signal), so that a run
  // shorter than logging.every still shows its loss. A record that cannot be written (a full disk)
  // becomes failure(), and no record after it is written: the files end at the step before it, whole.
  void record(const StepMetrics& m, double eta_seconds, bool last);
  void note(const std::string& line);  // a line of the run's log (the train logger, info)
  // The run's segment of its records starts after step `step` (0: from the beginning), once
  // run_records.h has found the records this run's: the JSONL's rows of later steps, left by a run
  // that went past its last checkpoint, are dropped (they are trained again), so that the file holds
  // one row a step; what it cannot read as a row is kept, on a line of its own. The first row written
  // next carries `segment` as its "segment" object, with "number" (the kept rows' last one plus 1;
  // rows before any record count as segment 1) and "after_step" added in front: the boundary.
  // Opens the TensorBoard event file; where the directory held events already, its first event is
  // TensorBoard's restart marker (SessionLog START at step + 1, which hides the older events of the
  // later steps) naming the segment. Says on the console what it dropped. std::invalid_argument
  // naming the key where a file cannot be opened.
  void start_segment(std::int64_t step, nlohmann::ordered_json segment);
  // Closes the files at the end of the run; a close that reports a failed write becomes failure().
  void close();
  // The first record that could not be written: the file, the cause and what was lost.
  const std::optional<std::string>& failure() const { return failure_; }

 private:
  void write_records(const StepMetrics& m);
  void draw_progress(std::int64_t step, double eta_seconds);
  std::string jsonl_path_, tensorboard_dir_;
  std::unique_ptr<RecordFile> jsonl_;
  std::optional<nlohmann::ordered_json> segment_;  // start_segment's, until a row carries it
  std::unique_ptr<TensorBoardLog> tensorboard_;
  std::optional<std::string> failure_;
  std::int64_t total_steps_;
  std::int64_t log_every_;
  bool tty_;
  bool bar_visible_ = false;
};

// What every rank stops with once rank 0's records are lost (`log`: rank 0's, nullptr elsewhere):
// rank 0's failure and what the run can say of its steps: none kept without `checkpoint_dir`, else
// those up to `last_saved_step` (0: none), the checkpoint the next run resumes from, and those after
// it up to `steps_done`, which it trains again.
std::runtime_error records_lost_error(const MetricsLog* log, const std::string& checkpoint_dir,
                                      std::int64_t last_saved_step, std::int64_t steps_done);

}  // namespace ptrain::train
