// Proves a schedule can run: every (mb, chunk) has exactly one F, B (and W when split) on the
// right rank; every send has its matching recv in the same order on each channel; local order
// respects F -> B -> W; and executing all lists with asynchronous sends and blocking receives
// finishes (no deadlock).
#pragma once

#include <string>
#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline {

// Empty = the schedule is correct and deadlock-free.
std::vector<std::string> check(const Schedule& schedule);

}  // namespace ptrain::pipeline
