// SeriesSampler (app/report_sampler.h): a curve of any length is drawn from a bounded number of
// points that keep its first and last points and every extreme; a short curve keeps every point.
#include "app/report_sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using ptrain::app::SeriesSampler;
using Point = SeriesSampler::Point;

TEST_CASE("a short curve keeps every point") {
  SeriesSampler sampler(10);
  std::vector<Point> added;
  for (int i = 0; i < 20; ++i) {
    added.emplace_back(i, std::sin(i));
    sampler.add(added.back());
  }
  CHECK(sampler.points() == added);
}

TEST_CASE("a long curve keeps a bounded number of points, its ends and its extremes, in order") {
  for (const int n : {21, 1000, 4097, 1000003}) {
    SeriesSampler sampler(10);
    double low = 1e9, high = -1e9;
    for (int i = 0; i < n; ++i) {
      // noise, with one spike up and one down somewhere in the middle
      const double y = i == n / 3 ? 1000.0 : i == 2 * n / 3 ? -1000.0 : std::sin(i * 0.37) + 0.001 * (i % 7);
      low = std::min(low, y), high = std::max(high, y);
      sampler.add({static_cast<double>(i), y});
    }
    const std::vector<Point> points = sampler.points();
    INFO("n = " << n);
    CHECK(points.size() <= 2 + 4 * 10);
    CHECK(points.front() == Point(0.0, std::sin(0.0)));
    CHECK(points.back().first == n - 1);
    CHECK(std::is_sorted(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.first < b.first; }));
    CHECK(std::adjacent_find(points.begin(), points.end()) == points.end());
    CHECK(std::count(points.begin(), points.end(), Point(n / 3, 1000.0)) == 1);
    CHECK(std::count(points.begin(), points.end(), Point(2 * n / 3, -1000.0)) == 1);
    const auto [lowest, highest] = std::minmax_element(points.begin(), points.end(),
                                                       [](const Point& a, const Point& b) { return a.second < b.second; });
    CHECK(lowest->second == low);
    CHECK(highest->second == high);
  }
}

TEST_CASE("every bucket keeps its own extremes: a plateau's edges survive") {
  SeriesSampler sampler(50);
  for (int i = 0; i < 100000; ++i) sampler.add({static_cast<double>(i), i < 50000 ? 1.0 : 5.0});
  const std::vector<Point> points = sampler.points();
  CHECK(points.size() <= 2 + 4 * 50);
  // the step from 1 to 5 is drawn where it is, to within one bucket of the 100000 points
  const auto up = std::find_if(points.begin(), points.end(), [](const Point& p) { return p.second == 5.0; });
  REQUIRE(up != points.begin());
  CHECK(up->first - std::prev(up)->first <= 100000 / 50);
}
