// Drawings of a simulated schedule: terminal timeline, SVG, Chrome trace (chrome://tracing).
#pragma once

#include <string>

#include "engine/pipeline/simulator.h"

namespace ptrain::pipeline {

// One row per pp rank; each cell a time slot; F/B/W with microbatch ids, '.' for bubble.
std::string render_ascii(const Schedule& schedule, const SimResult& sim, int max_width = 160);
std::string render_svg(const Schedule& schedule, const SimResult& sim);
std::string render_chrome_trace(const Schedule& schedule, const SimResult& sim);

}  // namespace ptrain::pipeline
