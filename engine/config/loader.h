// Loading a job: YAML text + --set overrides -> validated JobSpec with every degree resolved.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/diagnostics.h"
#include "engine/config/job_spec.h"

namespace ptrain::config {

// A job spec is a few KiB; anything bigger is the wrong file (and would only slow the parser).
inline constexpr std::size_t kMaxJobBytes = 4u << 20;

struct LoadOptions {
  std::vector<std::string> overrides;  // "a.b=value", applied on top of the YAML, same checks
  std::optional<int> world;            // --world / --nproc / launcher; default nodes*gpus_per_node
  // false: read the document and the overrides only, without the cross-field rules, so derived
  // fields stay unset (`ptrain plan` reads a job this way and derives each layout with rederive).
  bool derive = true;
};

struct Location {
  int line = 0, column = 0;  // 1-based; 0 = not from the YAML file
  std::string origin;        // file name or "--set key=value"
};

struct LoadResult {
  JobSpec spec;       // meaningful only when diags.ok()
  Diagnostics diags;  // every problem found, not just the first
  // Dotted key path -> where it was written: the position of the key itself (not its value), for
  // every key read, sections included ("model", "model.moe", "optimizer.betas"). A --set records
  // {0, 0, "--set key=value"} and replaces the file's entry.
  std::map<std::string, Location> locations;
  std::string origin;  // the file name (or the origin given to load_string)
  bool ok() const { return diags.ok(); }

  // A diagnostic about `key` located where that key was written (later stages such as plan use
  // this so their errors point into the YAML too). A key that was not written is located at the
  // nearest enclosing section that was ("model.moe.experts" -> "model.moe" -> "model"); failing
  // that, at `origin` with line 0. "schedule.layers_per_stage[2]" is located at its list.
  Diagnostic at(const std::string& key, std::string message, std::string fix = {}) const;
};

// Never throws and never crashes on any input; problems become diagnostics. Text larger than
// kMaxJobBytes, not UTF-8, or with control bytes is rejected before it reaches the YAML parser.
LoadResult load_string(const std::string& yaml_text, const std::string& origin, const LoadOptions& opts = {});
// Refuses a file larger than kMaxJobBytes; a missing or unreadable file, a directory or another
// file that is not a regular one (a named pipe: never waited on) is a diagnostic with key "" and
// the path as origin.
LoadResult load_file(const std::string& path, const LoadOptions& opts = {});
// The text load_file reads, or nothing with the reason in `diags`.
std::optional<std::string> read_job_file(const std::string& path, Diagnostics& diags);

// The cross-field rules and derived values of a load, run again on `changed`: a copy of job.spec
// (job loaded, or read with derive = false, without errors) with some fields set anew, e.g. another layout
// for `ptrain plan`. The result is what loading the YAML with those values would give, without reading it
// again: every derived field is recomputed from the changed ones, diagnostics keep job's locations. The world
// is changed.world.
LoadResult rederive(const LoadResult& job, JobSpec changed);

}  // namespace ptrain::config
