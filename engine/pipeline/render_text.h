// Internal to engine/pipeline: text shared by the renderers.
#pragma once

#include <string>

#include "engine/pipeline/simulator.h"

namespace ptrain::pipeline::detail {

// "F3" (vpp == 1) or "F3.1" (microbatch 3, chunk 1), "F3.1&" for the F of an F&B pair: see render.h.
std::string op_label(const Span& span, int vpp);
// What the '&' of a pair's F means, and how the pairs were timed; empty when there are none.
std::string pairs_legend(const SimResult& sim);
// "1f1b pp=4 vpp=1 microbatches=8, bubble 27.3% (rank 0, computing most), makespan 33 s": the
// bubble of simulator.h's definition
std::string schedule_title(const Schedule& schedule, const SimResult& sim);
// Duration of the shortest op with a positive duration; 0 if there is none.
double shortest_op(const SimResult& sim);
// Seconds with a unit that keeps 3 significant digits: "850 us", "12.5 ms", "3.20 s".
std::string format_seconds(double seconds);

}  // namespace ptrain::pipeline::detail
