// Checks of flag values that CLI11 applies before a command runs: a failed one is exit 2 with
// "--flag: why".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

namespace ptrain::app {

// For a path or name flag: an empty value is an error (exit 2), not "not given".
const CLI::Validator& non_empty();

// For a count flag: a whole number in [lo, hi]. "abc" is "'abc' is not a whole number", 0 is "0 is
// out of range (expected 1 to 1048576)" (CLI11's Range said "Value abc not in range" for both).
CLI::Validator whole_number_in(std::int64_t lo, std::int64_t hi);

}  // namespace ptrain::app
