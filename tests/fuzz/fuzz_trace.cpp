// libFuzzer target: arbitrary bytes as the trace `ptrain report` reads (logging.trace, Chrome trace
// JSON). For a pipeline of 1 to 4 stages the reader must either refuse the trace with
// std::invalid_argument, find no step (nullopt), or return a timeline of exactly that many stages
// whose times are finite, which the schedule's drawing then renders. Anything else (another
// exception, a crash, a sanitizer report, a stack overflow) is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "app/report_timeline.h"
#include "engine/pipeline/render.h"
#include "engine/pipeline/schedule.h"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const nlohmann::json trace = nlohmann::json::parse(data, data + size, nullptr, false);
  if (trace.is_discarded()) return 0;
  for (int pp = 1; pp <= 4; ++pp) {
    std::optional<ptrain::app::MeasuredStep> step;
    try {
      step = ptrain::app::measured_step(trace, pp);
    } catch (const std::invalid_argument&) {
      continue;
    }
    if (!step) continue;
    const ptrain::pipeline::SimResult& t = step->timeline;
    require(t.timeline.size() == static_cast<std::size_t>(pp) && t.busy.size() == t.timeline.size());
    require(std::isfinite(t.makespan) && t.makespan >= 0);
    for (const auto& rank : t.timeline)
      for (const auto& span : rank) require(std::isfinite(span.start) && std::isfinite(span.end) && span.start <= span.end);
    const ptrain::pipeline::Schedule schedule = ptrain::pipeline::build(ptrain::config::ScheduleKind::OneFOneB, pp, 1, 4);
    require(!ptrain::pipeline::render_svg(schedule, t).empty());
  }
  return 0;
}
