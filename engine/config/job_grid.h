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

// Whether a MoE model's experts are split over exactly the tp groups: ep = tp > 1 and
// parallel.order puts the expert grid's ep groups on the tp groups. Then the tp ranks, which hold
// the same tokens, each run their share of the experts (model/moe_block.h); otherwise (any other
// ep, or an order that makes other ep groups) the experts are apart from tp and tokens go to them
// by all-to-all over the ep group.
bool experts_over_tp(const JobSpec& spec);

// The grid of a job the rules accepted: they reject every grid problem, so one here is a
// programming error (std::logic_error).
grid::RankGrid job_grid(const JobSpec& spec);

}  // namespace ptrain::config
