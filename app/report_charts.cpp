#include "app/report_charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace ptrain::app {
namespace {

std::string number(double v) {
  char text[32];
  const double a = std::abs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3))
    std::snprintf(text, sizeof text, "%.2e", v);
  else
    std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// Round tick positions covering [lo, hi]: about `count` of them at 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double lo, double hi, int count) {
  const double span = hi - lo;
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 2 ? 2 * power : raw / power < 5 ? 5 * power : 10 * power;
  std::vector<double> out;
  // + 0.0: ceil(-0.3) * step is -0, which prints as "-0"
  for (double t = std::ceil(lo / step) * step + 0.0; t <= hi + 1e-9 * span; t += step) out.push_back(t);
  return out;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string line_chart(const Chart& chart, int width, int height) {
  constexpr double kLeft = 70, kRight = 20, kBottom = 40;
  constexpr double kLegendTop = 32, kLegendRow = 16;  // the legend's rows, under the title
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : chart.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  for (const Level& level : chart.reference) y_lo = std::min(y_lo, level.value), y_hi = std::max(y_hi, level.value);
  std::string svg = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + std::to_string(height) + "\" role=\"img\" aria-label=\"" +
                    html_escape(chart.title) + "\">\n<text x=\"" + std::to_string(width / 2) +
                    "\" y=\"18\" text-anchor=\"middle\" class=\"title\">" + html_escape(chart.title) + "</text>\n";
  if (!std::isfinite(x_lo)) return svg + "<text x=\"70\" y=\"60\">no data</text>\n</svg>\n";
  if (x_hi == x_lo) x_hi = x_lo + 1;
  const double pad = y_hi > y_lo ? 0.05 * (y_hi - y_lo) : std::max(1e-9, 0.05 * std::abs(y_hi) + 1e-9);
  y_lo -= pad, y_hi += pad;

  // The legend goes above the plot, never on a curve: one entry per reference and drawn series, in
  // rows that wrap at the chart's width. The plot starts under its last row.
  struct Entry {
    std::string name, color;
    bool dashed;
    double x = 0, y = 0;
  };
  std::vector<Entry> legend;
  if (!chart.reference.empty()) legend.push_back({chart.reference_name, "#444", true});
  for (const Series& s : chart.series)
    if (!s.points.empty()) legend.push_back({s.name, s.color, false});
  double legend_x = kLeft, legend_y = kLegendTop;
  for (Entry& e : legend) {
    const double entry_width = 30 + 7.0 * static_cast<double>(e.name.size());
    if (legend_x > kLeft && legend_x + entry_width > width - kRight) legend_x = kLeft, legend_y += kLegendRow;
    e.x = legend_x, e.y = legend_y;
    legend_x += entry_width;
  }
  const double top = legend.empty() ? kLegendTop - 4 : legend_y + 10;

  const double plot_w = width - kLeft - kRight, plot_h = height - top - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return top + (y_hi - y) / (y_hi - y_lo) * plot_h; };
  char buf[256];
  std::snprintf(buf, sizeof buf, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", kLeft,
                top, plot_w, plot_h);
  svg += buf;
  for (const Entry& e : legend) {
    std::snprintf(buf, sizeof buf, "<g class=\"legend\"><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"",
                  e.x, e.x + 18, e.y, e.y);
    svg += buf + e.color + "\" stroke-width=\"2\"" + (e.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>";
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">", e.x + 22, e.y + 4);
    svg += buf + html_escape(e.name) + "</text></g>\n";
  }
  for (const double t : ticks(y_lo, y_hi, 5)) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"end\" class=\"tick\">",
                  kLeft, kLeft + plot_w, py(t), py(t), kLeft - 6, py(t) + 4);
    svg += buf + number(t) + "</text>\n";
  }
  for (const double t : ticks(x_lo, x_hi, 6)) {
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"tick\">", px(t),
                  top + plot_h + 16);
    svg += buf + number(t) + "</text>\n";
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"axis\">step</text>\n",
                kLeft + plot_w / 2, height - 6);
  svg += buf;
  std::snprintf(buf, sizeof buf,
                "<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\" class=\"axis\">", top + plot_h / 2);
  svg += buf + html_escape(chart.y_label) + "</text>\n";
  // One level alone spans the chart (a run of one job); a segment's, its own steps.
  const bool whole = chart.reference.size() == 1;
  for (const Level& level : chart.reference) {
    const double from = whole ? kLeft : px(std::clamp(level.from, x_lo, x_hi));
    const double to = whole ? kLeft + plot_w : px(std::clamp(level.to, x_lo, x_hi));
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"reference\" stroke=\"#444\" "
                  "stroke-dasharray=\"5 3\"/>\n",
                  from, to, py(level.value), py(level.value));
    svg += buf;
  }
  for (const Boundary& b : chart.boundaries) {
    if (!(b.step >= x_lo && b.step <= x_hi)) continue;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"boundary\" stroke=\"#b00\" "
                  "stroke-dasharray=\"2 2\"/><text x=\"%.1f\" y=\"%.1f\" class=\"tick\" fill=\"#b00\">",
                  px(b.step), px(b.step), top, top + plot_h, px(b.step) + 3, top + plot_h - 4);
    svg += buf + html_escape(b.label) + "</text>\n";
  }
  for (const Series& s : chart.series) {
    if (s.points.empty()) continue;
    std::string points;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(x), py(y));
      points += buf;
    }
    svg += "<polyline class=\"series\" fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.5\" points=\"" + points +
           "\"/>\n";
    if (s.points.size() <= 30)
      for (const auto& [x, y] : s.points) {
        std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"", px(x), py(y));
        svg += buf + s.color + "\"/>";
      }
  }
  return svg + "</svg>\n";
}

}  // namespace ptrain::app
