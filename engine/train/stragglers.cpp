#include "engine/train/stragglers.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

namespace ptrain::train {
namespace {

double median(std::vector<double> v) {
  const std::size_t n = v.size(), middle = n / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(middle), v.end());
  const double upper = v[middle];
  if (n % 2 == 1) return upper;
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(middle)) + upper) / 2;
}

}  // namespace

SlowestRank slowest_rank(std::span<const double> seconds, std::span<const int> stage) {
  std::map<int, std::vector<double>> by_stage;
  for (std::size_t r = 0; r < seconds.size(); ++r) by_stage[stage[r]].push_back(seconds[r]);
  std::map<int, double> medians;
  for (auto& [s, values] : by_stage) medians[s] = median(std::move(values));
  SlowestRank out;
  for (std::size_t r = 0; r < seconds.size(); ++r) {
    const SlowestRank candidate{static_cast<int>(r), seconds[r], medians[stage[r]]};
    if (r == 0 || candidate.ratio() > out.ratio() ||
        (candidate.ratio() == out.ratio() && candidate.seconds > out.seconds))
      out = candidate;
  }
  return out;
}

std::optional<std::string> StragglerWatch::observe(std::int64_t step, const SlowestRank& slowest) {
  if (slowest.ratio() <= ratio_) {
    rank_ = -1, stretch_ = 0;
    return std::nullopt;
  }
  stretch_ = slowest.rank == rank_ ? stretch_ + 1 : 1;
  rank_ = slowest.rank;
  if (stretch_ != steps_) return std::nullopt;
  char text[320];
  std::snprintf(text, sizeof text,
                "rank %d straggles: its compute took %.4f s in step %lld against the median rank's %.4f s "
                "(%.2fx), over logging.straggler_ratio %.2f for %lld steps in a row (from step %lld); the "
                "other ranks wait for it in every step's collectives",
                slowest.rank, slowest.seconds, static_cast<long long>(step), slowest.median_seconds, slowest.ratio(),
                ratio_, static_cast<long long>(steps_), static_cast<long long>(step - steps_ + 1));
  return std::string(text);
}

}  // namespace ptrain::train
