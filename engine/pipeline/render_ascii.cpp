// Terminal drawing of a simulated schedule (format in render.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "engine/pipeline/render.h"
#include "engine/pipeline/render_text.h"

namespace ptrain::pipeline {
namespace {

constexpr int kIdle = -1;

// cells[rank][c] = index into sim.timeline[rank] of the op covering cell c, or kIdle.
std::vector<std::vector<int>> to_cells(const SimResult& sim, double cell_seconds, int cells) {
  std::vector<std::vector<int>> grid(sim.timeline.size(), std::vector<int>(cells, kIdle));
  for (size_t rank = 0; rank < sim.timeline.size(); ++rank) {
    const auto& spans = sim.timeline[rank];
    for (size_t i = 0; i < spans.size(); ++i) {
      const long first = std::lround(spans[i].start / cell_seconds);
      const long last = std::min<long>(std::lround(spans[i].end / cell_seconds), cells);
      for (long c = first; c < last; ++c) grid[rank][c] = static_cast<int>(i);
    }
  }
  return grid;
}

std::string pad(std::string text, size_t width) {
  text.resize(std::max(width, text.size()), ' ');
  return text;
}

std::string idle_share(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "| idle %.1f%%", 100.0 * fraction);
  return buf;
}

// One labelled cell per time cell.
std::string labelled_row(const std::vector<Span>& spans, const std::vector<int>& cells, int vpp,
                         size_t cell_width) {
  std::string row;
  for (size_t c = 0; c < cells.size(); ++c) {
    if (cells[c] == kIdle) {
      row += pad(".", cell_width);
    } else if (c == 0 || cells[c - 1] != cells[c]) {
      row += pad(detail::op_label(spans[cells[c]], vpp), cell_width);
    } else {
      row += std::string(cell_width, ' ');
    }
  }
  return row;
}

// One character per column of `per_column` cells: the op kind covering most of it (F, B, W), or,
// where idle cells are the most, the lower-case kind of the work in it (f, b, w) and '.' only where
// there is none. A rank whose ops are much shorter than another's (a pipeline's last stage with a
// large vocabulary's head) would otherwise draw as idle from end to end.
std::string compact_row(const std::vector<Span>& spans, const std::vector<int>& cells, int per_column) {
  std::string row;
  for (size_t first = 0; first < cells.size(); first += per_column) {
    std::array<int, 4> count{};  // F, B, W, idle
    const size_t last = std::min(cells.size(), first + per_column);
    for (size_t c = first; c < last; ++c) {
      const int i = cells[c];
      ++count[i == kIdle ? 3 : static_cast<int>(spans[i].op)];  // Forward, Backward, WeightGrad = 0, 1, 2
    }
    const size_t work = std::max_element(count.begin(), count.begin() + 3) - count.begin();
    if (count[work] == 0) row += '.';
    else row += count[work] >= count[3] ? "FBW"[work] : "fbw"[work];
  }
  return row;
}

}  // namespace

std::string render_ascii(const Schedule& schedule, const SimResult& sim, int max_width) {
  std::string out = detail::schedule_title(schedule, sim) + "\n";
  const double shortest = detail::shortest_op(sim);
  if (shortest == 0.0) return out + "(nothing to draw: every op takes no time)\n";

  const int cells = static_cast<int>(std::lround(sim.makespan / shortest));
  const auto grid = to_cells(sim, shortest, cells);
  const size_t name_width = std::string("rank " + std::to_string(schedule.pp - 1)).size();
  const size_t frame_width = name_width + 2 + idle_share(1.0).size() + 1;  // "rank N |" ... " | idle 100.0%"

  size_t label_width = 0;
  for (const auto& spans : sim.timeline) {
    for (const Span& s : spans) label_width = std::max(label_width, detail::op_label(s, schedule.vpp).size());
  }
  const size_t cell_width = label_width + 1;
  const bool labelled = frame_width + cells * cell_width <= static_cast<size_t>(std::max(max_width, 0));
  const int room = std::max(10, max_width - static_cast<int>(frame_width));
  const int per_column = labelled ? 1 : (cells + room - 1) / room;

  const std::string kinds = std::string(schedule.vpp > 1 ? "F3.1 = forward of microbatch 3, chunk 1"
                                                         : "F3 = forward of microbatch 3") +
                            "; B backward" + (schedule.split_weight_grad ? ", W weight grad" : "");
  std::string legend =
      kinds + "; '.' idle; 1 cell = " + detail::format_seconds(shortest) + " (the shortest op)";
  if (!labelled) {
    legend = "scaled to fit " + std::to_string(max_width) +
             " columns: 1 character = " + std::to_string(per_column) + " cell(s) of " +
             detail::format_seconds(shortest) +
             ", showing the op kind filling most of it (F forward, B backward" +
             (schedule.split_weight_grad ? ", W weight grad" : "") +
             "; lower case: work, but less than the idle time in it; '.' idle); labels dropped";
  }
  if (const std::string pairs = detail::pairs_legend(sim); !pairs.empty()) legend += "; " + pairs;
  out += legend + "\n";
  for (int rank = 0; rank < schedule.pp; ++rank) {
    const auto& spans = sim.timeline[rank];
    const std::string row = labelled ? labelled_row(spans, grid[rank], schedule.vpp, cell_width)
                                     : compact_row(spans, grid[rank], per_column);
    out += pad("rank " + std::to_string(rank), name_width) + " |" + row + " " +
           idle_share(sim.idle_fraction[rank]) + "\n";
  }
  return out;
}

}  // namespace ptrain::pipeline
