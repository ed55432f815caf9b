// Helpers shared by the config tests: corpus paths, loading snippets, finding diagnostics.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/config/loader.h"

namespace ptrain::config::testing {

// Absolute path of a file under tests/config.
std::string corpus_path(const std::string& relative);
// The YAML files directly under tests/config/<folder>, sorted.
std::vector<std::string> corpus_files(const std::string& folder);
std::string read_text(const std::string& path);

LoadResult load(const std::string& yaml, const std::vector<std::string>& overrides = {},
                std::optional<int> world = std::nullopt);

// The first diagnostic with this key, or nullptr.
const Diagnostic* find_key(const std::vector<Diagnostic>& diagnostics, const std::string& key);
// Every diagnostic formatted, one per line: for failure messages.
std::string describe_all(const Diagnostics& diags);

}  // namespace ptrain::config::testing
