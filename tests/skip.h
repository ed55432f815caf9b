// A Catch case that cannot run here skips visibly instead of passing: PTRAIN_SKIP(why) reports the
// reason with the marker that ctest's SKIP_REGULAR_EXPRESSION looks for (every ptrain_test binary
// sets it, tests/CMakeLists.txt), and ends the case, which ctest then lists as skipped. Skip before
// any check: ctest reads a case with the marker as skipped whatever it checked before.
#pragma once

#include <catch2/catch.hpp>

#define PTRAIN_SKIP(why)                  \
  do {                                    \
    WARN("PTRAIN_TEST_SKIPPED: " << why); \
    return;                               \
  } while (false)
