// What `ptrain report` shows of a run's stragglers (train/stragglers.h): the slowest rank's compute
// over the median rank's, step by step, against the warning's ratio; and for each segment the rank
// that was the slowest in most of its steps, by how much, and the worst step. Tallied from the
// metrics rows' slowest_rank fields as they stream past: memory by ranks, not by rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptrain::app {

struct StragglerTally {
  struct Rank {
    std::int64_t steps = 0;  // the steps it was the slowest in
    double ratio_sum = 0;    // of their ratios
    double worst_ratio = 0;
    std::int64_t worst_step = 0;
  };
  std::map<int, Rank> ranks;
  std::int64_t steps = 0;  // the rows that name a slowest rank

  // A metrics row of step `step` (checked by report_metrics.cpp: where present, slowest_rank is a
  // rank and slowest_rank_ratio a number).
  void add(std::int64_t step, const nlohmann::json& row);
};

// What is wrong with a row's slowest_rank ("" if nothing): a rank is a whole number in [0, 2^31).
std::string slowest_rank_problem(const nlohmann::json& row);

struct Boundary;
struct SegmentJob;
struct RunMetrics;

// The page's Stragglers section: the ratio's curve with each segment's logging.straggler_ratio,
// and a row per segment. A note where no row names a slowest rank (runs before the field).
std::string stragglers_section(const RunMetrics& metrics, const std::vector<SegmentJob>& jobs,
                               const std::vector<Boundary>& boundaries);

}  // namespace ptrain::app
