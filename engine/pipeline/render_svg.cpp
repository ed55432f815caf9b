// SVG drawing of a simulated schedule (format in render.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/pipeline/render.h"
#include "engine/pipeline/render_text.h"

namespace ptrain::pipeline {
namespace {

constexpr double kLeft = 80, kTop = 44, kRowHeight = 28, kRowGap = 6, kRight = 24;
constexpr double kMinLabelWidth = 22;  // px: narrower ops keep their label in the tooltip only
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

}  // namespace

std::string render_svg(const Schedule& schedule, const SimResult& sim) {
  // Wide enough that the shortest op can carry its label, within reason.
  const double shortest = detail::shortest_op(sim);
  const double cells = shortest > 0 ? sim.makespan / shortest : 1;
  const double plot_width = std::clamp(cells * kMinLabelWidth * 1.4, 600.0, 8000.0);
  const double seconds = sim.makespan > 0 ? sim.makespan : 1.0;
  const double px_per_second = plot_width / seconds;
  const double rows_bottom = kTop + schedule.pp * (kRowHeight + kRowGap);
  const double axis_y = rows_bottom + 4;
  const double legend_y = axis_y + 40;
  const double width = kLeft + plot_width + kRight;
  const double height = legend_y + 20 + (schedule.vpp > 1 ? 18 : 0);

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
         "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += text(kLeft, 20, detail::schedule_title(schedule, sim), " font-size=\"14\" font-weight=\"bold\"");

  for (int rank = 0; rank < schedule.pp; ++rank) {
    const double y = kTop + rank * (kRowHeight + kRowGap);
    svg += text(8, y + kRowHeight / 2 + 4, "rank " + std::to_string(rank));
    const auto& spans = sim.timeline[rank];
    for (const Span& span : spans) {
      const double x = kLeft + span.start * px_per_second, w = (span.end - span.start) * px_per_second;
      const std::string label = detail::op_label(span, schedule.vpp);
      svg += "<rect class=\"op\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
             "\" height=\"" + num(kRowHeight) + "\" fill=\"" + fill_of(span.op, span.chunk) +
             "\" stroke=\"white\" stroke-width=\"0.5\"><title>" + escaped(label) + " rank " + std::to_string(rank) +
             ": " + detail::format_seconds(span.start) + " to " + detail::format_seconds(span.end) +
             "</title></rect>\n";
      if (w >= kMinLabelWidth) {
        const bool light = std::min(span.chunk, kShades - 1) >= 2;
        svg +=
            text(x + w / 2, y + kRowHeight / 2 + 4, label,
                 light ? " text-anchor=\"middle\" fill=\"#222\"" : " text-anchor=\"middle\" fill=\"white\"");
      }
    }
    // Outlines after the ops, so that none is painted over.
    for (size_t i = 0; i < spans.size(); ++i) {
      if (!spans[i].overlapped || spans[i].op != Op::Forward) continue;
      size_t last = i;  // the pair: its F, then its B (and W)
      while (last + 1 < spans.size() && spans[last + 1].overlapped && spans[last + 1].op != Op::Forward) ++last;
      svg += "<rect class=\"pair\" x=\"" + num(kLeft + spans[i].start * px_per_second) + "\" y=\"" + num(y) +
             "\" width=\"" + num((spans[last].end - spans[i].start) * px_per_second) + "\" height=\"" +
             num(kRowHeight) + "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"/>\n";
    }
  }

  // Time axis.
  svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(axis_y) + "\" x2=\"" + num(kLeft + plot_width) +
         "\" y2=\"" + num(axis_y) + "\" stroke=\"black\"/>\n";
  const double step = tick_step(seconds);
  for (double t = 0; t <= seconds * (1 + 1e-9); t += step) {
    const double x = kLeft + t * px_per_second;
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(axis_y) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(axis_y + 5) + "\" stroke=\"black\"/>\n";
    svg += text(x, axis_y + 17, t == 0 ? "0" : detail::format_seconds(t), " text-anchor=\"middle\"");
  }
  svg += text(kLeft + plot_width, axis_y + 31, "time", " text-anchor=\"end\"");

  // Legend: one swatch per op kind and chunk shade.
  std::vector<Op> kinds = {Op::Forward, Op::Backward};
  if (schedule.split_weight_grad) kinds.push_back(Op::WeightGrad);
  const int shades = std::min(schedule.vpp, kShades);
  double x = kLeft;
  for (Op op : kinds) {
    for (int chunk = 0; chunk < shades; ++chunk) {
      std::string name = op == Op::Forward    ? "F forward"
                         : op == Op::Backward ? "B backward"
                                              : "W weight grad";
      if (schedule.vpp > 1)
        name += " chunk " + std::to_string(chunk) + (chunk == shades - 1 && shades < schedule.vpp ? "+" : "");
      svg += "<rect class=\"legend\" x=\"" + num(x) + "\" y=\"" + num(legend_y - 10) +
             "\" width=\"14\" height=\"12\" fill=\"" + fill_of(op, chunk) + "\"/>\n";
      svg += text(x + 20, legend_y, name);
      x += schedule.vpp > 1 ? 140 : 120;
    }
  }
  if (schedule.vpp > 1) {
    std::string labels = "labels: F3.1 = forward of microbatch 3, chunk 1";
    if (const std::string pairs = detail::pairs_legend(sim); !pairs.empty())
      labels += "; outlined, " + pairs;
    svg += text(kLeft, legend_y + 18, labels);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace ptrain::pipeline
