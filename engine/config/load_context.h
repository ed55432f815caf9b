// The state shared by the steps of one load: the result being filled, where values come from,
// and which keys were rejected (so that rules depending on them stay quiet instead of piling up
// follow-on errors).
#pragma once

#include <yaml-cpp/mark.h>

#include <cstddef>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include "engine/config/loader.h"

namespace ptrain::config {

// Where the YAML being read came from: the job file (positions are real) or one --set (line 0).
struct Source {
  std::string origin;
  bool has_positions = true;

  // yaml-cpp marks are 0-based and may be null; Locations are 1-based, 0 meaning "no position".
  Location at(const YAML::Mark& mark) const;
};

class LoadContext {
 public:
  explicit LoadContext(LoadResult& result) : result_(result) {}

  JobSpec& spec() { return result_.spec; }
  LoadResult& result() { return result_; }

  void report_error(Diagnostic diagnostic);
  void report_warning(Diagnostic diagnostic);
  // Diagnostics about a key, located where the key was written (see LoadResult::at).
  void error(const std::string& key, std::string message, std::string fix = {});
  void warning(const std::string& key, std::string message, std::string fix = {});

  void mark_bad(std::string key);
  // True when any of the keys, or a section above it, was rejected or could not be resolved.
  bool any_bad(std::initializer_list<std::string_view> keys) const;
  bool was_written(const std::string& key) const { return result_.locations.count(key) > 0; }

  // Adds the "N more errors" note when the error list was capped.
  void finish();

  // How the world size was decided, for messages: "cluster.nodes * cluster.gpus_per_node = 4 * 8".
  std::string world_source;

 private:
  // A file full of garbage would otherwise produce one error per line.
  static constexpr std::size_t kMaxErrors = 100;

  LoadResult& result_;
  std::set<std::string, std::less<>> bad_keys_;
  std::size_t dropped_errors_ = 0;
};

}  // namespace ptrain::config
