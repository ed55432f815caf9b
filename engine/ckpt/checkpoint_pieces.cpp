#include "engine/ckpt/checkpoint_pieces.h"

#include <algorithm>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {

bool plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& path,
                           const std::string& what) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw CheckpointError(path, what + ": invalid shape " + nlohmann::json(shape).dump());
  }
  return n;
}

std::vector<std::int64_t> read_shape(const nlohmann::json& value, const std::string& path,
                                     const std::string& what) {
  if (!value.is_array()) throw CheckpointError(path, what + ": expected a shape list, found " + value.dump());
  std::vector<std::int64_t> shape;
  for (const nlohmann::json& d : value) {
    std::int64_t dim = 0;
    if (!json_int64(d, dim) || dim < 0)
      throw CheckpointError(path, what + ": expected non-negative integers, found " + value.dump());
    shape.push_back(dim);
  }
  checked_numel(shape, path, what);
  return shape;
}

std::int64_t checked_runs_numel(const IndexRuns& runs, const std::string& path, const std::string& what) {
  std::int64_t total = 0;
  for (const IndexRun& r : runs) {
    if (__builtin_add_overflow(total, r.numel(), &total))
      throw CheckpointError(path, what + ": runs hold more elements than can be counted");
  }
  return total;
}

std::vector<Segment> build_segments(const std::vector<const IndexRuns*>& piece_runs) {
  std::vector<Segment> all;
  for (std::size_t p = 0; p < piece_runs.size(); ++p) {
    for_each_block(*piece_runs[p], [&](std::int64_t start, std::int64_t length, std::int64_t position) {
      if (length > 0) all.push_back({start, length, p, position});
    });
  }
  std::stable_sort(all.begin(), all.end(), [](const Segment& a, const Segment& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.piece < b.piece;
  });
  std::vector<Segment> disjoint;
  std::int64_t covered = 0;
  for (Segment s : all) {
    if (s.begin < covered) {
      const std::int64_t cut = covered - s.begin;
      if (cut >= s.length) continue;
      s.begin += cut, s.length -= cut, s.stored_offset += cut;
    }
    covered = s.begin + s.length;
    disjoint.push_back(s);
  }
  return disjoint;
}

std::optional<std::pair<std::int64_t, std::int64_t>> first_gap(const std::vector<Segment>& segments,
                                                               std::int64_t numel) {
  std::int64_t covered = 0;
  for (const Segment& s : segments) {
    if (s.begin > covered) return std::make_pair(covered, s.begin);
    covered = std::max(covered, s.begin + s.length);
  }
  if (covered < numel) return std::make_pair(covered, numel);
  return std::nullopt;
}

}  // namespace ptrain::ckpt
