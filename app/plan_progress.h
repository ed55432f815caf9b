// `ptrain plan`'s progress on a long search (Mixtral on 64 GPUs takes seconds, a large global batch
// half a minute): a line of the plan logger (info: stderr, never stdout, where the table or --json
// goes) once the search has run for a second, then every few seconds, and one when it ends if any
// was shown. A search that ends within the second (most do) says nothing.
#pragma once

#include <chrono>

#include "engine/plan/search.h"

namespace ptrain::app {

class PlanProgress {
 public:
  PlanProgress();
  // The search's callback (plan::search_layouts).
  void operator()(const plan::SearchProgress& p);
  // After the search: how long it took, if a progress line was shown.
  void finish(const plan::SearchResult& result) const;

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
  Clock::time_point next_;  // the next line is due then
  bool shown_ = false;
};

}  // namespace ptrain::app
