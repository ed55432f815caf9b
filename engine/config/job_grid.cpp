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

grid::RankGrid job_grid(const JobSpec& spec) {
  std::vector<std::string> problems;
  grid::RankGrid grid = make_job_grid(spec, &problems);
  if (!problems.empty()) throw std::logic_error("the rank grid of an accepted job: " + problems.front());
  return grid;
}

}  // namespace ptrain::config
