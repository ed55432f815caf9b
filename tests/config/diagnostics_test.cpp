#include "engine/config/diagnostics.h"

#include <catch2/catch.hpp>

namespace ptrain::config {

TEST_CASE("Diagnostic::format writes origin:line:col: key: message (fix: ...)", "[config][diagnostics]") {
  CHECK(Diagnostic{"parallel.tp", 12, 5, "must be >= 1, got 0", "use 1", "job.yaml"}.format() ==
        "job.yaml:12:5: parallel.tp: must be >= 1, got 0 (fix: use 1)");
  CHECK(Diagnostic{"parallel.tp", 0, 0, "must be >= 1, got 0", "", "--set parallel.tp=0"}.format() ==
        "--set parallel.tp=0: parallel.tp: must be >= 1, got 0");
  CHECK(Diagnostic{"", 3, 1, "invalid YAML", "", "job.yaml"}.format() == "job.yaml:3:1: invalid YAML");
  CHECK(Diagnostic{"name", 0, 0, "must not be empty", "", ""}.format() == "name: must not be empty");
}

TEST_CASE("Diagnostics::ok is about errors only", "[config][diagnostics]") {
  Diagnostics diags;
  diags.warnings.push_back({});
  CHECK(diags.ok());
  diags.errors.push_back({});
  CHECK_FALSE(diags.ok());
}

}  // namespace ptrain::config
