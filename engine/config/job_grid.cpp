#include "engine/config/job_grid.h"

#include <stdexcept>

namespace ptrain::config {

grid::Degrees job_degrees(const JobSpec& spec) {
  const ParallelSpec& p = spec.parallel;
  return {p.tp, p.cp, p.ep, p.dp, p.pp};
}

grid::RankGrid make_job_grid(const JobSpec& spec, std::vector<std::string>* problems) {
  return grid::RankGrid::make(job_degrees(spec), spec.parallel.order, spec.model.moe.has_value(), problems);
}

bool experts_over_tp(const JobSpec& spec) {
  const ParallelSpec& p = spec.parallel;
  if (!spec.model.moe || p.tp < 2 || p.ep != p.tp) return false;
  std::vector<std::string> problems;  // the layout alone: no group listing
  const grid::RankGrid grid = grid::RankGrid::make(job_degrees(spec), p.order, false, &problems);
  return problems.empty() && grid.ep_groups_are_tp_groups();
}

grid::RankGrid job_grid(const JobSpec& spec) {
  std::vector<std::string> problems;
  grid::RankGrid grid = make_job_grid(spec, &problems);
  if (!problems.empty()) throw std::logic_error("the rank grid of an accepted job: " + problems.front());
  return grid;
}

}  // namespace ptrain::config
