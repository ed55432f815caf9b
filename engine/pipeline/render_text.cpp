#include "engine/pipeline/render_text.h"

#include <cmath>
#include <cstdio>

namespace ptrain::pipeline::detail {

std::string op_label(const Span& span, int vpp) {
  std::string label = std::string(to_string(span.op)) + std::to_string(span.microbatch);
  if (vpp > 1) label += "." + std::to_string(span.chunk);
  if (span.overlapped && span.op == Op::Forward) label += "&";
  return label;
}

std::string pairs_legend(const SimResult& sim) {
  for (const auto& spans : sim.timeline)
    for (const Span& s : spans)
      if (s.overlapped)
        return std::string("F3.0& = the F of an F&B pair with the B (and W) after it, ") +
               (sim.pairs_as_one_op ? "timed as one overlapped op" : "run F then B as ptrain's executor does");
  return "";
}

double shortest_op(const SimResult& sim) {
  double shortest = 0.0;
  for (const auto& spans : sim.timeline) {
    for (const Span& s : spans) {
      const double d = s.end - s.start;
      if (d > 0 && (shortest == 0.0 || d < shortest)) shortest = d;
    }
  }
  return shortest;
}

std::string format_seconds(double seconds) {
  struct Unit {
    double scale;
    const char* name;
  };
  constexpr Unit kUnits[] = {{1.0, "s"}, {1e-3, "ms"}, {1e-6, "us"}};
  Unit unit = kUnits[2];
  for (const Unit& u : kUnits) {
    if (std::fabs(seconds) >= u.scale) {
      unit = u;
      break;
    }
  }
  const double value = seconds / unit.scale;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s",
                std::fabs(value) >= 100  ? 0
                : std::fabs(value) >= 10 ? 1
                                         : 2,
                value, unit.name);
  return buf;
}

std::string schedule_title(const Schedule& schedule, const SimResult& sim) {
  char bubble[32];
  std::snprintf(bubble, sizeof bubble, "%.1f%%", 100.0 * sim.bubble.fraction);
  return std::string(config::to_string(schedule.kind)) + " pp=" + std::to_string(schedule.pp) +
         " vpp=" + std::to_string(schedule.vpp) + " microbatches=" + std::to_string(schedule.microbatches) +
         (schedule.max_in_flight > 0 ? " max_in_flight=" + std::to_string(schedule.max_in_flight) : std::string()) +
         ", bubble " + bubble + " (rank " + std::to_string(sim.bubble.rank) + ", computing most), makespan " +
         format_seconds(sim.makespan);
}

}  // namespace ptrain::pipeline::detail
