// The typical step of a run: medians of what each step measured (its time, the seconds inside
// each axis's collectives, the optimizer, the pipeline's bubble), over the run's steps after
// its first two (start-up, first touches) and the last kKept at most. `ptrain run` sets it against
// validate's prediction when the run ends (app/run_report.h).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

#include "engine/train/metrics.h"

namespace ptrain::train {

// How many first steps a typical step leaves out of `steps` in all: the first two, start-up and
// first touches, when there are later ones. (`ptrain report` takes its medians past the same.)
inline std::size_t start_up_steps(std::size_t steps) { return steps > 2 ? 2 : 0; }

struct TypicalStep {
  int steps = 0;  // how many steps the medians are over
  double step_s = 0, optimizer_s = 0, compute_s = 0;
  std::optional<PerAxis> comm_s;          // world > 1
  // pp > 1: the pipeline's bubble (StepMetrics::pipeline_bubble), its seconds the median, its rank
  // the last step's.
  std::optional<pipeline::Bubble> pipeline_bubble;
};

class StepRecord {
 public:
  static constexpr std::size_t kKept = 1000;
  void add(const StepMetrics& m);
  std::optional<TypicalStep> typical() const;  // nullopt before the first step

 private:
  std::deque<StepMetrics> steps_;
  int seen_ = 0;
};

}  // namespace ptrain::train
