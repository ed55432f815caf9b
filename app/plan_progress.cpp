#include "app/plan_progress.h"

#include "engine/log/log.h"

namespace ptrain::app {
namespace {

constexpr std::chrono::milliseconds kFirstAfter{1000};
constexpr std::chrono::milliseconds kEvery{3000};

}  // namespace

PlanProgress::PlanProgress() : start_(Clock::now()), next_(start_ + kFirstAfter) {}

void PlanProgress::operator()(const plan::SearchProgress& p) {
  const Clock::time_point now = Clock::now();
  if (now < next_) return;
  next_ = now + kEvery;
  shown_ = true;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (p.ranking) {
    log::plan().info("ranking: {} of {} fitting layouts estimated in full ({:.1f} s)", p.estimated,
                     p.candidates, seconds);
  } else {
    log::plan().info("searching: {} layouts looked at, {} fit, {} exceed memory, {} break a rule ({:.1f} s)",
                     p.layouts, p.fitting, p.over_memory, p.invalid, seconds);
  }
}

void PlanProgress::finish(const plan::SearchResult& result) const {
  if (!shown_) return;
  log::plan().info("searched {} layouts and estimated {} in full in {:.1f} s", result.layouts,
                   result.estimated, std::chrono::duration<double>(Clock::now() - start_).count());
}

}  // namespace ptrain::app
