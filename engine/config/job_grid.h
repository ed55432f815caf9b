// The rank grid of a job: its parallel degrees and parallel.order, with the expert grid checked
// where the model has experts. The one place a JobSpec becomes a grid::RankGrid, for the rules
// (which report its problems at parallel.order) and for everything that runs after them.
#pragma once

#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/grid/rank_grid.h"

namespace ptrain::config {

grid::Degrees job_degrees(const JobSpec& spec);

// The grid and, appended to `problems`, why it is unusable (if it is).
grid::RankGrid make_job_grid(const JobSpec& spec, std::vector<std::string>* problems);

// The grid of a job the rules accepted: they reject every grid problem, so one here is a
// programming error (std::logic_error).
grid::RankGrid job_grid(const JobSpec& spec);

}  // namespace ptrain::config
