// "Did you mean": the closest known name to a misspelled key or enum value.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptrain::config {

// Optimal-string-alignment distance (insertions, deletions, substitutions, adjacent swaps),
// ignoring ASCII case.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible typo: at most one edit
// per three characters (at least one, at most three). Ties go to the earlier candidate.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace ptrain::config
