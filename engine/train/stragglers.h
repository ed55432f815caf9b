// Stragglers: in each step the rank whose compute (its pipeline phase outside its own calls, as
// StepMetrics::compute_seconds counts it) is furthest above the median rank's, and a warning when
// one rank stays above logging.straggler_ratio x that median for logging.straggler_steps steps in a
// row. A rank is set against the ranks that do the same work, those of its pipeline stage: stages
// differ in work by design (the pipeline's bubble shows that), and wall-clock step times cannot
// tell a straggler (every rank waits for the slowest in the step's collectives).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace ptrain::train {

struct SlowestRank {
  int rank = 0;               // world rank
  double seconds = 0;         // its compute in the step
  double median_seconds = 0;  // the median of its stage's ranks' (the mean of the middle two of an even count)
  double ratio() const { return median_seconds > 0 ? seconds / median_seconds : 1.0; }
};

// The rank whose compute is the largest multiple of its stage's median: `seconds[r]` and `stage[r]`
// are rank r's compute and pipeline stage (equal ratios: the most seconds, then the lowest rank).
// One rank alone in its stage has ratio 1. Precondition: equal, non-zero sizes.
SlowestRank slowest_rank(std::span<const double> seconds, std::span<const int> stage);

class StragglerWatch {
 public:
  // `ratio` > 1 and `steps` >= 1 (logging.straggler_ratio, logging.straggler_steps).
  StragglerWatch(double ratio, std::int64_t steps) : ratio_(ratio), steps_(steps) {}

  // Step `step`'s slowest rank. The warning once the same rank has stayed above the ratio for
  // `steps` steps in a row, naming it, its seconds, the median's and the ratio; once per stretch
  // (a step within the ratio, or another rank slowest, starts a new one). nullopt otherwise.
  std::optional<std::string> observe(std::int64_t step, const SlowestRank& slowest);

 private:
  double ratio_;
  std::int64_t steps_;
  int rank_ = -1;            // the rank above the ratio in the steps before, -1: none
  std::int64_t stretch_ = 0;  // how many steps in a row
};

}  // namespace ptrain::train
