// SVG drawing of a simulated schedule (format in render.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/pipeline/render.h"
#include "engine/pipeline/render_text.h"

namespace ptrain::pipeline {
namespace {

constexpr double kLeft = 80, kTop = 44, kRowHeight = 28, kRowGap = 6, kRight = 24, kLineHeight = 18;
constexpr double kFont = 11, kTitleFont = 14;  // px
constexpr double kMinLabelWidth = 22;  // px: narrower ops (or narrower than the label) keep it in the tooltip only
constexpr int kShades = 4;

// Per op kind, chunk 0 darkest; chunks past the last shade share the lightest.
constexpr const char* kForward[kShades] = {"#1f5fbf", "#4a84d6", "#7ea8e6", "#b3cdf2"};
constexpr const char* kBackward[kShades] = {"#2e8b3e", "#55ab63", "#86c891", "#b8e0be"};
constexpr const char* kWeightGrad[kShades] = {"#d9731a", "#e8954a", "#f0b47d", "#f6d2b0"};

const char* fill_of(Op op, int chunk) {
  const char* const* shades = op == Op::Forward ? kForward : op == Op::Backward ? kBackward : kWeightGrad;
  return shades[std::min(chunk, kShades - 1)];
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A tick step of 1, 2 or 5 times a power of ten giving at most ~10 ticks.
double tick_step(double span) {
  const double raw = span / 10.0;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10.0 * power;
}

// Text for XML character data: the '&' of an F&B pair's label, say.
std::string escaped(const std::string& raw) {
  std::string out;
  for (char c : raw) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  return out;
}

std::string text(double x, double y, const std::string& content, const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + extra + ">" + escaped(content) + "</text>\n";
}

// The width of a line of sans-serif text, estimated (a pure library has no font metrics): at most
// 0.62 em a character of these labels (digits, lower case, a few capitals), 0.68 em in bold.
double text_width(const std::string& line, double font_size, bool bold = false) {
  return static_cast<double>(line.size()) * font_size * (bold ? 0.68 : 0.62);
}

struct LegendItem {
  Op op;
  int chunk;
  std::string name;
};

// One swatch per op kind and chunk shade.
std::vector<LegendItem> legend_items(const Schedule& schedule) {
  std::vector<Op> kinds = {Op::Forward, Op::Backward};
  if (schedule.split_weight_grad) kinds.push_back(Op::WeightGrad);
  const int shades = std::min(schedule.vpp, kShades);
  std::vector<LegendItem> items;
  for (Op op : kinds) {
    for (int chunk = 0; chunk < shades; ++chunk) {
      std::string name = op == Op::Forward    ? "F forward"
                         : op == Op::Backward ? "B backward"
                                              : "W weight grad";
      if (schedule.vpp > 1)
        name += " chunk " + std::to_string(chunk) + (chunk == shades - 1 && shades < schedule.vpp ? "+" : "");
      items.push_back({op, chunk, name});
    }
  }
  return items;
}

}  // namespace

std::string render_svg(const Schedule& schedule, const SimResult& sim, const std::optional<SvgTimeAxis>& axis) {
  // Wide enough that the shortest op can carry its label, within reason; or as the caller's axis.
  const double shortest = detail::shortest_op(sim);
  const double cells = shortest > 0 ? sim.makespan / shortest : 1;
  const double plot_width =
      axis ? std::max(axis->width - kLeft - kRight, 100.0) : std::clamp(cells * kMinLabelWidth * 1.4, 600.0, 8000.0);
  const double drawn = axis ? std::max(axis->seconds, sim.makespan) : sim.makespan;
  const double seconds = drawn > 0 ? drawn : 1.0;
  const double px_per_second = plot_width / seconds;
  const double rows_bottom = kTop + schedule.pp * (kRowHeight + kRowGap);
  const double axis_y = rows_bottom + 4;

  // The lines of text under the legend, and the width that every line of text needs.
  const std::string title = detail::schedule_title(schedule, sim);
  std::vector<std::string> notes;
  if (schedule.vpp > 1) notes.push_back("labels: F3.1 = forward of microbatch 3, chunk 1");
  if (const std::string pairs = detail::pairs_legend(sim); !pairs.empty()) notes.push_back("outlined: " + pairs);
  double width = std::max(kLeft + plot_width, kLeft + text_width(title, kTitleFont, true)) + kRight;
  for (const std::string& note : notes) width = std::max(width, kLeft + text_width(note, kFont) + kRight);

  // The legend's swatches, in rows that wrap at the drawing's width.
  const std::vector<LegendItem> items = legend_items(schedule);
  std::vector<std::pair<double, double>> at;  // each item's x and baseline
  double x = kLeft, y = axis_y + 40;
  for (const LegendItem& item : items) {
    const double item_width = 20 + text_width(item.name, kFont) + 16;
    if (x > kLeft && x + item_width > width - kRight) x = kLeft, y += kLineHeight;
    at.emplace_back(x, y);
    x += item_width;
  }
  const double notes_y = y + kLineHeight;
  const double height = notes_y + kLineHeight * static_cast<double>(notes.size());

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"" +
         num(kFont) + "\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += text(kLeft, 20, title, " class=\"title\" font-size=\"14\" font-weight=\"bold\"");

  for (int rank = 0; rank < schedule.pp; ++rank) {
    const double row_y = kTop + rank * (kRowHeight + kRowGap);
    svg += text(8, row_y + kRowHeight / 2 + 4, "rank " + std::to_string(rank));
    const auto& spans = sim.timeline[rank];
    for (const Span& span : spans) {
      const double op_x = kLeft + span.start * px_per_second, w = (span.end - span.start) * px_per_second;
      const std::string label = detail::op_label(span, schedule.vpp);
      svg += "<rect class=\"op\" x=\"" + num(op_x) + "\" y=\"" + num(row_y) + "\" width=\"" + num(w) +
             "\" height=\"" + num(kRowHeight) + "\" fill=\"" + fill_of(span.op, span.chunk) +
             "\" stroke=\"white\" stroke-width=\"0.5\"><title>" + escaped(label) + " rank " + std::to_string(rank) +
             ": " + detail::format_seconds(span.start) + " to " + detail::format_seconds(span.end) +
             "</title></rect>\n";
      if (w >= std::max(kMinLabelWidth, text_width(label, kFont) + 4)) {
        const bool light = std::min(span.chunk, kShades - 1) >= 2;
        svg += text(op_x + w / 2, row_y + kRowHeight / 2 + 4, label,
                    light ? " text-anchor=\"middle\" fill=\"#222\"" : " text-anchor=\"middle\" fill=\"white\"");
      }
    }
    // Outlines after the ops, so that none is painted over.
    for (size_t i = 0; i < spans.size(); ++i) {
      if (!spans[i].overlapped || spans[i].op != Op::Forward) continue;
      size_t last = i;  // the pair: its F, then its B (and W)
      while (last + 1 < spans.size() && spans[last + 1].overlapped && spans[last + 1].op != Op::Forward) ++last;
      svg += "<rect class=\"pair\" x=\"" + num(kLeft + spans[i].start * px_per_second) + "\" y=\"" + num(row_y) +
             "\" width=\"" + num((spans[last].end - spans[i].start) * px_per_second) + "\" height=\"" +
             num(kRowHeight) + "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"/>\n";
    }
  }

  // Time axis.
  svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(axis_y) + "\" x2=\"" + num(kLeft + plot_width) +
         "\" y2=\"" + num(axis_y) + "\" stroke=\"black\"/>\n";
  const double step = tick_step(seconds);
  for (double t = 0; t <= seconds * (1 + 1e-9); t += step) {
    const double tick_x = kLeft + t * px_per_second;
    svg += "<line x1=\"" + num(tick_x) + "\" y1=\"" + num(axis_y) + "\" x2=\"" + num(tick_x) + "\" y2=\"" +
           num(axis_y + 5) + "\" stroke=\"black\"/>\n";
    svg += text(tick_x, axis_y + 17, t == 0 ? "0" : detail::format_seconds(t), " class=\"tick\" text-anchor=\"middle\"");
  }
  svg += text(kLeft + plot_width, axis_y + 31, "time", " text-anchor=\"end\"");

  for (size_t i = 0; i < items.size(); ++i) {
    const auto [item_x, item_y] = at[i];
    svg += "<rect class=\"legend\" x=\"" + num(item_x) + "\" y=\"" + num(item_y - 10) +
           "\" width=\"14\" height=\"12\" fill=\"" + fill_of(items[i].op, items[i].chunk) + "\"/>\n";
    svg += text(item_x + 20, item_y, items[i].name);
  }
  for (size_t i = 0; i < notes.size(); ++i) svg += text(kLeft, notes_y + kLineHeight * static_cast<double>(i), notes[i]);
  svg += "</svg>\n";
  return svg;
}

}  // namespace ptrain::pipeline
