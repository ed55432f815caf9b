// Drawings of a simulated schedule: terminal timeline, SVG, Chrome trace (chrome://tracing).
// Op labels everywhere: F = forward, B = backward (input grad, plus weight grad when W is not
// split), W = weight grad; then the microbatch id, and for interleaved schedules (vpp > 1) a dot
// and the model chunk: "F3" = forward of microbatch 3, "B3.1" = backward of microbatch 3, chunk 1.
// An F that opens an F&B pair (dualpipev) ends in '&' ("F3.0&"): it and the B (and W) after it are
// one pair, which DualPipe runs overlapped; the legends say whether the simulation timed it so.
#pragma once

#include <optional>
#include <string>

#include "engine/pipeline/simulator.h"

namespace ptrain::pipeline {

// One row per pp rank, time in cells of the shortest op's duration (op starts and ends rounded to
// the nearest cell). A header line gives kind, pp, vpp, microbatches, the bubble (simulator.h) and
// the makespan; a legend line says what a cell is. Each op prints its label in its first cell and
// blank continuation cells after it; '.' marks an idle cell; each row ends with the rank's idle
// share. If the labelled drawing is wider than max_width, it switches to one character per column
// (F, B or W where that op kind fills most of the column; f, b or w where idle time is the most
// but there is work; '.' where there is none), each column covering as many cells as needed to
// fit, and the legend says so.
std::string render_ascii(const Schedule& schedule, const SimResult& sim, int max_width = 160);

// The time axis of an SVG drawing: `seconds` (at least the makespan) across a drawing `width` px
// wide (the plot is that less the rank names' column and a margin). Drawings given the same axis
// share one scale: the report's measured step beside the simulated one.
struct SvgTimeAxis {
  double seconds = 0;
  double width = 0;
};

// A standalone SVG document: one <rect class="op"> per compute op (with a <title> tooltip), filled
// by op kind (F blue, B green, W orange) and chunk (later chunks lighter); labels on ops wide
// enough; rank names; a time axis in seconds; a legend of <rect class="legend"> swatches; one
// unfilled <rect class="pair"> around each F&B pair, as DualPipe's figure draws them. Without
// `axis`, the plot is wide enough that the shortest op can carry its label (600 to 8000 px). The
// document is never narrower than its title and legend lines need (11 px text, the title 14 px),
// and its legend wraps at its width.
std::string render_svg(const Schedule& schedule, const SimResult& sim,
                       const std::optional<SvgTimeAxis>& axis = std::nullopt);

// Chrome trace JSON: {"traceEvents": [...]} with one complete event (ph "X", pid 0, tid = pp rank,
// ts/dur in microseconds, name like "F mb3 c1", cat forward|backward|weight_grad, args with
// microbatch, chunk and virtual_stage, and "pair": true for an op of an F&B pair) per compute op,
// plus "M" metadata events naming the process
// and one thread per pp rank.
std::string render_chrome_trace(const Schedule& schedule, const SimResult& sim);

}  // namespace ptrain::pipeline
