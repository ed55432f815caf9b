// Loading a job: YAML text + --set overrides -> validated JobSpec with every degree resolved.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/diagnostics.h"
#include "engine/config/job_spec.h"

namespace ptrain::config {

struct LoadOptions {
  std::vector<std::string> overrides;  // "a.b=value", applied on top of the YAML, same checks
  std::optional<int> world;            // --world / --nproc / launcher; default nodes*gpus_per_node
};

struct Location {
  int line = 0, column = 0;  // 1-based; 0 = not from the YAML file
  std::string origin;        // file name or "--set key=value"
};

struct LoadResult {
  JobSpec spec;            // meaningful only when diags.ok()
  Diagnostics diags;       // every problem found, not just the first
  std::map<std::string, Location> locations;  // dotted key path -> where its value came from
  bool ok() const { return diags.ok(); }

  // A diagnostic about `key` located where that key was written (later stages such as plan use
  // this so their errors point into the YAML too).
  Diagnostic at(const std::string& key, std::string message, std::string fix = {}) const;
};

// Never throws and never crashes on any input; problems become diagnostics.
LoadResult load_string(const std::string& yaml_text, const std::string& origin, const LoadOptions& opts = {});
LoadResult load_file(const std::string& path, const LoadOptions& opts = {});

}  // namespace ptrain::config
