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

struct Chart {
  std::string title;
  std::string y_label;
  std::vector<Series> series;
  std::optional<double> reference;  // a horizontal dashed line (a prediction), named reference_name
  std::string reference_name;
};

// An <svg> element of width x height: axes with ticks, one polyline per series (a dot per point
// when a series has few), the reference line, a legend. Empty series are left out.
std::string line_chart(const Chart& chart, int width = 640, int height = 280);

// Text made safe for HTML and SVG content and attribute values.
std::string html_escape(const std::string& text);

}  // namespace ptrain::app
