// The two forms of the validate report: a human one for the terminal and one JSON object whose
// field names are the contract in docs/validate.md ("The JSON report").
#pragma once

#include <string>

#include "engine/config/diagnostics.h"
#include "engine/config/job_spec.h"
#include "engine/plan/estimate.h"

namespace ptrain::app {

// "1.50 GiB": a count of bytes in binary units, as the report and run's memory messages write it.
std::string bytes_text(double bytes);

// `engine_runs_it`: `ptrain run` executes the layout today (config::engine_limits is empty).
std::string human_report(const config::JobSpec& spec, const plan::Estimate& est, bool engine_runs_it);
std::string json_report(const config::JobSpec& spec, const plan::Estimate& est);
// For a job that did not load: only the problems.
std::string json_diagnostics(const config::Diagnostics& diags);

}  // namespace ptrain::app
