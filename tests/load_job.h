// Test support: a job spec loaded from YAML text (or a file of the repository, for targets that
// define PTRAIN_SOURCE_DIR) as `ptrain validate` loads a file, failing the test (with the
// diagnostics) if it does not load.
#pragma once

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/loader.h"

namespace ptrain::test {

inline config::LoadResult load_job(const std::string& yaml, std::vector<std::string> overrides = {},
                                   std::optional<int> world = std::nullopt) {
  config::LoadOptions options;
  options.overrides = std::move(overrides);
  options.world = world;
  config::LoadResult job = config::load_string(yaml, "test.yaml", options);
  for (const config::Diagnostic& d : job.diags.errors) UNSCOPED_INFO(d.format());
  REQUIRE(job.ok());
  return job;
}

#ifdef PTRAIN_SOURCE_DIR
// `path` relative to the repository's root, e.g. "configs/gpt2-124m.yaml".
inline config::LoadResult load_file(const std::string& path, std::vector<std::string> overrides = {}) {
  config::LoadOptions options;
  options.overrides = std::move(overrides);
  config::LoadResult job = config::load_file(std::string(PTRAIN_SOURCE_DIR) + "/" + path, options);
  for (const config::Diagnostic& d : job.diags.errors) UNSCOPED_INFO(d.format());
  REQUIRE(job.ok());
  return job;
}
#endif

}  // namespace ptrain::test
