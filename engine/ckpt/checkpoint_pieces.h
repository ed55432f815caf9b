// How a checkpoint's tensors lie in its pieces, shared by saving (the commit checks that the ranks'
// pieces cover every tensor) and loading (reads find each element's piece): checked shapes and
// counts from a manifest, and the segments that cover a tensor from its pieces. Internal to
// engine/ckpt (checkpoint_save.cpp, checkpoint_load.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/ckpt/index_runs.h"

namespace ptrain::ckpt {

// A file name inside a step directory: no separators, no "..", nothing hidden.
bool plain_file_name(const std::string& name);

// The elements of `shape`; a negative or overflowing shape is a CheckpointError naming `path` and
// `what`.
std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& path, const std::string& what);
// A shape list of a manifest, checked as above.
std::vector<std::int64_t> read_shape(const nlohmann::json& value, const std::string& path, const std::string& what);
// The elements `runs` hold, or a CheckpointError where they cannot be counted.
std::int64_t checked_runs_numel(const IndexRuns& runs, const std::string& path, const std::string& what);

// Sorted, disjoint blocks of a tensor's global indices and where each is stored. Where several
// pieces hold the same elements (replicas), the first piece in manifest order wins.
struct Segment {
  std::int64_t begin = 0, length = 0;
  std::size_t piece = 0;
  std::int64_t stored_offset = 0;  // element offset inside the piece's stored tensor
};
std::vector<Segment> build_segments(const std::vector<const IndexRuns*>& piece_runs);

// The first global element range [begin, end) of a tensor of `numel` elements that no segment
// covers, or nullopt if all are covered.
std::optional<std::pair<std::int64_t, std::int64_t>> first_gap(const std::vector<Segment>& segments,
                                                               std::int64_t numel);

}  // namespace ptrain::ckpt
