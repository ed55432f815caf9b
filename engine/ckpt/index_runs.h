// Which global elements a stored tensor holds: runs of global flat indices, in storage order.
// A run is `count` blocks of `length` consecutive indices, block i starting at start + i*stride;
// count = 1 is a plain contiguous range. Strided runs keep the manifest small for row-parallel
// (column-split) weights, whose slices are one range per row.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/model/param_registry.h"

namespace ptrain::ckpt {

struct IndexRun {
  std::int64_t start = 0;
  std::int64_t length = 0;
  std::int64_t stride = 0;  // meaningful when count > 1; >= length
  std::int64_t count = 1;
  std::int64_t numel() const { return length * count; }
  bool operator==(const IndexRun&) const = default;
};
using IndexRuns = std::vector<IndexRun>;

// Appends [start, start + length) after everything in `runs`, merging it into the last run when it
// continues it (contiguously, or as the next block at the same stride).
void append_range(IndexRuns& runs, std::int64_t start, std::int64_t length);

IndexRuns runs_from_indices(std::span<const std::int64_t> indices);
std::vector<std::int64_t> expand_runs(const IndexRuns& runs);
std::int64_t runs_numel(const IndexRuns& runs);

// Calls fn(global_start, length, position) for every contiguous block, in storage order; position
// counts elements from the start of the stored tensor.
template <typename Fn>
void for_each_block(const IndexRuns& runs, Fn&& fn) {
  std::int64_t position = 0;
  for (const IndexRun& r : runs) {
    for (std::int64_t b = 0; b < r.count; ++b) {
      fn(r.start + b * r.stride, r.length, position);
      position += r.length;
    }
  }
}

// The runs of stored elements [first, first + count).
IndexRuns slice_runs(const IndexRuns& runs, std::int64_t first, std::int64_t count);

// The global flat indices a tp rank holds of parameter `info`, in its local storage order: the same
// blocks as model::for_each_tp_block, merged, without materialising one index per element.
IndexRuns param_runs(const model::ParamInfo& info, int tp_rank, int tp);

// JSON: [start, length] or [start, length, stride, count], in a list.
nlohmann::json runs_to_json(const IndexRuns& runs);
// Reads and checks runs (every index within [0, numel)); errors are CheckpointErrors naming
// `path` and `what`.
IndexRuns runs_from_json(const nlohmann::json& value, std::int64_t numel, const std::string& path,
                         const std::string& what);

}  // namespace ptrain::ckpt
