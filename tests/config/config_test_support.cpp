#include "tests/config/config_test_support.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ptrain::config::testing {

std::string corpus_path(const std::string& relative) {
  return std::string(PTRAIN_CONFIG_TEST_DIR) + "/" + relative;
}

std::vector<std::string> corpus_files(const std::string& folder) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(corpus_path(folder))) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

LoadResult load(const std::string& yaml, const std::vector<std::string>& overrides,
                std::optional<int> world) {
  LoadOptions opts;
  opts.overrides = overrides;
  opts.world = world;
  return load_string(yaml, "job.yaml", opts);
}

const Diagnostic* find_key(const std::vector<Diagnostic>& diagnostics, const std::string& key) {
  auto found =
      std::find_if(diagnostics.begin(), diagnostics.end(), [&](const Diagnostic& d) { return d.key == key; });
  return found == diagnostics.end() ? nullptr : &*found;
}

std::string describe_all(const Diagnostics& diags) {
  std::string out;
  for (const Diagnostic& d : diags.errors) out += "error: " + d.format() + "\n";
  for (const Diagnostic& d : diags.warnings) out += "warning: " + d.format() + "\n";
  return out;
}

}  // namespace ptrain::config::testing
