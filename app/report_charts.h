// Charts of `ptrain report`: inline SVG (no script, no network), so the page is one file that any
// browser shows as it is.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ptrain::app {

struct Series {
  std::string name;
  std::string color;                            // CSS colour
  std::vector<std::pair<double, double>> points;  // (step, value), in step order
};

// A prediction over the steps [from, to] (a segment of the run: each has its own job).
struct Level {
  double from = 0, to = 0;
  double value = 0;
};

// Where a segment of the run begins (train/run_records.h): a vertical line at `step`, labelled.
struct Boundary {
  double step = 0;
  std::string label;
};

struct Chart {
  std::string title;
  std::string y_label;
  std::vector<Series> series;
  std::vector<Level> reference;  // horizontal dashed lines (predictions), named reference_name
  std::string reference_name;
  std::vector<Boundary> boundaries;
};

// An <svg> element of width x height: axes with ticks, one polyline per series (a dot per point
// when a series has few), the reference lines, the boundaries, and a legend (<g class="legend">
// entries) above the plot, where it covers no curve. Empty series are left out.
std::string line_chart(const Chart& chart, int width = 640, int height = 280);

// Text made safe for HTML and SVG content and attribute values.
std::string html_escape(const std::string& text);

}  // namespace ptrain::app
