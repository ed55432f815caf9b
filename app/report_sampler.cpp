#include "app/report_sampler.h"

namespace ptrain::app {

SeriesSampler::SeriesSampler(std::size_t max_buckets) : max_buckets_(max_buckets < 1 ? 1 : max_buckets) {
  buckets_.reserve(2 * max_buckets_);
}

void SeriesSampler::add(Point p) {
  const std::size_t at = added_++;
  if (at == 0) first_ = p;
  last_ = p;
  if (at % width_ == 0) {  // the first point of a bucket
    if (buckets_.size() == 2 * max_buckets_) merge_pairs();
    buckets_.push_back({p, p, at, at});
    return;
  }
  Bucket& b = buckets_.back();
  if (p.second < b.low.second) b.low = p, b.low_at = at;
  if (p.second > b.high.second) b.high = p, b.high_at = at;
}

void SeriesSampler::merge_pairs() {
  for (std::size_t i = 0; i < max_buckets_; ++i) {
    const Bucket& a = buckets_[2 * i];
    const Bucket& b = buckets_[2 * i + 1];
    Bucket merged = a;  // on a tie the earlier point stays
    if (b.low.second < a.low.second) merged.low = b.low, merged.low_at = b.low_at;
    if (b.high.second > a.high.second) merged.high = b.high, merged.high_at = b.high_at;
    buckets_[i] = merged;
  }
  buckets_.resize(max_buckets_);
  width_ *= 2;
}

std::vector<SeriesSampler::Point> SeriesSampler::points() const {
  std::vector<Point> out;
  if (added_ == 0) return out;
  out.push_back(first_);
  std::size_t next = 1;  // the points before this index are out already
  auto emit = [&](const Point& p, std::size_t at) {
    if (at < next) return;
    out.push_back(p);
    next = at + 1;
  };
  for (const Bucket& b : buckets_) {
    if (b.low_at <= b.high_at) {
      emit(b.low, b.low_at);
      emit(b.high, b.high_at);
    } else {
      emit(b.high, b.high_at);
      emit(b.low, b.low_at);
    }
  }
  emit(last_, added_ - 1);
  return out;
}

}  // namespace ptrain::app
