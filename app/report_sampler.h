// The points of one chart series, bounded: a run of a million steps draws at most ~2000 points per
// curve (a chart 600 pixels wide shows no more), yet every spike and extreme stays in the drawing.
// The points go into buckets of consecutive points; each bucket keeps its lowest and its highest
// point. When the buckets fill, neighbours merge pairwise and each bucket takes twice as many
// points, so memory stays bounded however long the run, and the first and last points are kept.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ptrain::app {

class SeriesSampler {
 public:
  using Point = std::pair<double, double>;  // (step, value)

  // Up to 2 * max_buckets buckets (each two points), at least max_buckets once they filled.
  explicit SeriesSampler(std::size_t max_buckets = 500);

  void add(Point p);
  // In the order added: the first point, each bucket's lowest and highest (in their own order), the
  // last point; every point where at most 2 * max_buckets were added.
  std::vector<Point> points() const;
  std::size_t added() const { return added_; }

 private:
  struct Bucket {
    Point low, high;
    std::size_t low_at = 0, high_at = 0;  // index among the points added: their order
  };
  void merge_pairs();

  std::size_t max_buckets_;
  std::size_t width_ = 1;  // points a bucket takes
  std::size_t added_ = 0;
  std::vector<Bucket> buckets_;
  Point first_{}, last_{};
};

}  // namespace ptrain::app
