#include "app/report_charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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
  constexpr double kLeft = 70, kRight = 20, kTop = 30, kBottom = 40;
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
  const double plot_w = width - kLeft - kRight, plot_h = height - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return kTop + (y_hi - y) / (y_hi - y_lo) * plot_h; };
  char buf[256];
  std::snprintf(buf, sizeof buf, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", kLeft,
                kTop, plot_w, plot_h);
  svg += buf;
  for (const double t : ticks(y_lo, y_hi, 5)) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"end\" class=\"tick\">",
                  kLeft, kLeft + plot_w, py(t), py(t), kLeft - 6, py(t) + 4);
    svg += buf + number(t) + "</text>\n";
  }
  for (const double t : ticks(x_lo, x_hi, 6)) {
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"tick\">", px(t),
                  kTop + plot_h + 16);
    svg += buf + number(t) + "</text>\n";
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"axis\">step</text>\n",
                kLeft + plot_w / 2, height - 6);
  svg += buf;
  std::snprintf(buf, sizeof buf,
                "<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\" class=\"axis\">", kTop + plot_h / 2);
  svg += buf + html_escape(chart.y_label) + "</text>\n";
  double legend_x = kLeft + 8;
  auto legend = [&](const std::string& name, const std::string& color, bool dashed) {
    std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"", legend_x,
                  legend_x + 18, kTop + 12, kTop + 12);
    svg += buf + color + "\" stroke-width=\"2\"" + (dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>";
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">", legend_x + 22, kTop + 16);
    svg += buf + html_escape(name) + "</text>\n";
    legend_x += 30 + 7.0 * static_cast<double>(name.size());
  };
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
  if (!chart.reference.empty()) legend(chart.reference_name, "#444", true);
  for (const Boundary& b : chart.boundaries) {
    if (!(b.step >= x_lo && b.step <= x_hi)) continue;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"boundary\" stroke=\"#b00\" "
                  "stroke-dasharray=\"2 2\"/><text x=\"%.1f\" y=\"%.1f\" class=\"tick\" fill=\"#b00\">",
                  px(b.step), px(b.step), kTop, kTop + plot_h, px(b.step) + 3, kTop + plot_h - 4);
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
    legend(s.name, s.color, false);
  }
  return svg + "</svg>\n";
}

}  // namespace ptrain::app
