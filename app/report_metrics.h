// The metrics file of a run (logging.metrics, one JSON row a step) as `ptrain report` shows it,
// read in one pass, a row at a time: each row is checked as `ptrain run` writes them, its scalars go
// to bounded curves (report_sampler.h) and the few figures of the summary are kept, for the run and
// for each of its segments. Memory grows
// with the rows only by the three columns the medians need, never by the rows themselves: the
// metrics of a month-long run make a page of the same size as an hour's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/report_stragglers.h"

namespace ptrain::app {

// A stretch of the run that one `ptrain run` trained (train/run_records.h): from the row that
// carries its "segment" record to the next such row.
struct RunSegment {
  std::int64_t number = 1;
  std::int64_t first_step = 0, last_step = 0;
  // The "segment" object of its first row; none for rows written before runs recorded segments.
  std::optional<nlohmann::json> record;
  std::map<std::string, double> medians;  // as RunMetrics::medians, over this segment's rows
  StragglerTally stragglers;              // its rows' slowest ranks
};

struct RunMetrics {
  std::int64_t last_step = 0;
  std::optional<double> last_loss;  // the last row's (none where it has none, or a null)
  // By key of train::step_scalars(): (step, value) of every row that has it, sampled.
  std::map<std::string, std::vector<std::pair<double, double>>> curves;
  // tokens_per_s, mfu, step_s: the median after the start-up steps (train::start_up_steps), as the
  // run's own table; 0 where no row has it.
  std::map<std::string, double> medians;
  // In the file's order; one without a record where no row carries one.
  std::vector<RunSegment> segments;

  // The curve of `key` times `scale` (empty where no row has it).
  std::vector<std::pair<double, double>> curve(const std::string& key, double scale = 1.0) const;
};

// Reads `path`; nullopt after saying on stderr what is wrong (it cannot be read, a row that `ptrain
// run` does not write, naming its line, or no rows at all).
std::optional<RunMetrics> read_run_metrics(const std::string& path);

}  // namespace ptrain::app
