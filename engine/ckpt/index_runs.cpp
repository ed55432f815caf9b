#include "engine/ckpt/index_runs.h"

#include <algorithm>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {

void append_range(IndexRuns& runs, std::int64_t start, std::int64_t length) {
  if (length <= 0) return;
  if (!runs.empty()) {
    IndexRun& last = runs.back();
    if (last.count == 1 && last.start + last.length == start) {  // continues the range
      last.length += length;
      return;
    }
    if (last.length == length) {
      if (last.count == 1 && start - last.start >= length) {  // second block at a stride
        last.stride = start - last.start;
        last.count = 2;
        return;
      }
      if (last.count > 1 && start == last.start + last.count * last.stride) {  // next block at the stride
        ++last.count;
        return;
      }
    }
  }
  runs.push_back({start, length, 0, 1});
}

IndexRuns runs_from_indices(std::span<const std::int64_t> indices) {
  IndexRuns runs;
  std::size_t i = 0;
  while (i < indices.size()) {
    std::size_t j = i + 1;
    while (j < indices.size() && indices[j] == indices[j - 1] + 1) ++j;
    append_range(runs, indices[i], static_cast<std::int64_t>(j - i));
    i = j;
  }
  return runs;
}

std::vector<std::int64_t> expand_runs(const IndexRuns& runs) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(runs_numel(runs)));
  for_each_block(runs, [&](std::int64_t start, std::int64_t length, std::int64_t) {
    for (std::int64_t k = 0; k < length; ++k) out.push_back(start + k);
  });
  return out;
}

std::int64_t runs_numel(const IndexRuns& runs) {
  std::int64_t n = 0;
  for (const IndexRun& r : runs) n += r.numel();
  return n;
}

IndexRuns slice_runs(const IndexRuns& runs, std::int64_t first, std::int64_t count) {
  IndexRuns out;
  const std::int64_t last = first + count;
  std::int64_t position = 0;
  for (const IndexRun& r : runs) {
    if (position >= last) break;
    if (position + r.numel() <= first) {  // the whole run lies before the slice
      position += r.numel();
      continue;
    }
    for (std::int64_t b = 0; b < r.count; ++b, position += r.length) {
      const std::int64_t lo = std::max(first, position), hi = std::min(last, position + r.length);
      if (lo < hi) append_range(out, r.start + b * r.stride + (lo - position), hi - lo);
    }
  }
  return out;
}

IndexRuns param_runs(const model::ParamInfo& info, int tp_rank, int tp) {
  IndexRuns runs;
  model::for_each_tp_block(info, tp_rank, tp,
                           [&](std::int64_t start, std::int64_t length) { append_range(runs, start, length); });
  return runs;
}

nlohmann::json runs_to_json(const IndexRuns& runs) {
  nlohmann::json out = nlohmann::json::array();
  for (const IndexRun& r : runs) {
    if (r.count == 1) {
      out.push_back({r.start, r.length});
    } else {
      out.push_back({r.start, r.length, r.stride, r.count});
    }
  }
  return out;
}

IndexRuns runs_from_json(const nlohmann::json& value, std::int64_t numel, const std::string& path,
                         const std::string& what) {
  if (!value.is_array())
    throw CheckpointError(path, what + ": expected a list of runs, found " + value.dump());
  IndexRuns runs;
  for (const nlohmann::json& item : value) {
    auto bad = [&](const std::string& why) {
      return CheckpointError(path, what + ": run " + item.dump() + " " + why);
    };
    if (!item.is_array() || (item.size() != 2 && item.size() != 4))
      throw bad("is not [start, length] or [start, length, stride, count]");
    IndexRun r;
    std::int64_t* fields[] = {&r.start, &r.length, &r.stride, &r.count};
    for (std::size_t k = 0; k < item.size(); ++k)
      if (!json_int64(item[k], *fields[k]) || *fields[k] < 0)
        throw bad("has a field that is not a non-negative integer");
    if (item.size() == 2) r.stride = 0, r.count = 1;
    if (r.count < 1) throw bad("has count 0");
    // Never written (append_range drops empty ranges); its count would go unchecked (stride 0 passes
    // the bounds below) and every reader walks each block: 2^62 blocks of nothing.
    if (r.length < 1) throw bad("has length 0");
    if (r.count > 1 && r.stride < r.length) throw bad("has blocks that overlap (stride < length)");
    // The last index it touches, start + (count-1)*stride + length - 1, must lie within the tensor.
    std::int64_t span = 0, end = 0;
    if (__builtin_mul_overflow(r.count - 1, r.stride, &span) || __builtin_add_overflow(r.start, span, &end) ||
        __builtin_add_overflow(end, r.length, &end) || end > numel)
      throw bad("reaches past the end of the tensor (" + std::to_string(numel) + " elements)");
    runs.push_back(r);
  }
  return runs;
}

}  // namespace ptrain::ckpt
