#include "engine/train/typical_step.h"

#include <algorithm>
#include <vector>

namespace ptrain::train {
namespace {

template <typename Of>
double median(const std::deque<StepMetrics>& steps, std::size_t from, Of&& of) {
  std::vector<double> values;
  for (std::size_t i = from; i < steps.size(); ++i) values.push_back(of(steps[i]));
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace

void StepRecord::add(const StepMetrics& m) {
  seen_ += 1;
  steps_.push_back(m);
  if (steps_.size() > kKept) steps_.pop_front();
}

std::optional<TypicalStep> StepRecord::typical() const {
  if (steps_.empty()) return std::nullopt;
  // Skip this run's first two steps when there are later ones to take.
  const std::size_t skip = seen_ == static_cast<int>(steps_.size()) ? start_up_steps(steps_.size()) : 0;
  TypicalStep t;
  t.steps = static_cast<int>(steps_.size() - skip);
  t.step_s = median(steps_, skip, [](const StepMetrics& m) { return m.step_seconds; });
  t.optimizer_s = median(steps_, skip, [](const StepMetrics& m) { return m.optimizer_seconds; });
  t.compute_s = median(steps_, skip, [](const StepMetrics& m) { return m.compute_seconds; });
  if (steps_.back().comm_seconds) {
    auto axis = [&](double PerAxis::*a) {
      return median(steps_, skip, [a](const StepMetrics& m) { return m.comm_seconds ? (*m.comm_seconds).*a : 0.0; });
    };
    t.comm_s = PerAxis{axis(&PerAxis::tp), axis(&PerAxis::pp), axis(&PerAxis::dp), axis(&PerAxis::cp), axis(&PerAxis::ep)};
  }
  if (const auto& last = steps_.back().pipeline_bubble) {
    auto of = [](double pipeline::Bubble::*part) {
      return [part](const StepMetrics& m) { return m.pipeline_bubble ? (*m.pipeline_bubble).*part : 0.0; };
    };
    t.pipeline_bubble = pipeline::Bubble{last->rank, median(steps_, skip, of(&pipeline::Bubble::seconds)),
                                         median(steps_, skip, of(&pipeline::Bubble::fraction))};
  }
  return t;
}

}  // namespace ptrain::train
