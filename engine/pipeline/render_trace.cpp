// Chrome trace of a simulated schedule (format in render.h).
#include <nlohmann/json.hpp>

#include "engine/pipeline/render.h"
#include "engine/pipeline/render_text.h"

namespace ptrain::pipeline {
std::string render_chrome_trace(const Schedule& schedule, const SimResult& sim) {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args", {{"name", detail::schedule_title(schedule, sim)}}}});
  for (int rank = 0; rank < schedule.pp; ++rank) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", rank},
                      {"args", {{"name", "pp rank " + std::to_string(rank)}}}});
    for (const Span& span : sim.timeline[rank]) {
      json args = {{"microbatch", span.microbatch},
                   {"chunk", span.chunk},
                   {"virtual_stage", schedule.virtual_stage(rank, span.chunk)}};
      if (span.overlapped) args["pair"] = true;
      events.push_back({{"name", std::string(to_string(span.op)) + " mb" + std::to_string(span.microbatch) +
                                     " c" + std::to_string(span.chunk)},
                        {"cat", trace_category(span.op)},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", rank},
                        {"ts", span.start * 1e6},
                        {"dur", (span.end - span.start) * 1e6},
                        {"args", std::move(args)}});
    }
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace ptrain::pipeline
