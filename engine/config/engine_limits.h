// What `ptrain run` cannot execute yet in a job that the config rules accept (validate and plan
// model every layout): the trainer refuses such a job with the first limit (exit 2), and validate
// lists them all as warnings, so "valid" never hides a job that `run` would refuse. Pure, beside
// the rules, so that plan (below train) asks it too: plan/fp8_refusal.h, where the search tries fp8.
#pragma once

#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::config {

struct EngineLimit {
  std::string key;      // the YAML key that asks for it
  std::string message;  // what is not executed
  std::string fix;
};

// The same on both backends, but the ones that name the backend.
std::vector<EngineLimit> engine_limits(const JobSpec& spec);

}  // namespace ptrain::config
