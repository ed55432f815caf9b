// `ptrain plan --verify K`: the plan's K best layouts run for a few steps on this machine, each a
// `ptrain run` of its own (a child process, which starts its ranks as usual), and their measured
// steps set against the predicted ones, so the ranking can be checked before the real job.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/plan/search.h"

namespace ptrain::app {

struct VerifiedLayout {
  int row = 0;  // 1-based, in the plan's ranking
  double predicted_s = 0;
  // The median over rounds of each run's typical step (its median after the first two); none if a
  // run failed.
  std::optional<double> measured_s;
  std::vector<double> round_s;  // each round's run
  std::string failure;          // the run's last error line, when it failed
  int exit_code = 0;            // the failed run's
};

// What plan exits with after verifying `rows`: 0 where a layout ran; where none did, 2 if every run
// failed on bad input (the job's mistake, e.g. its data), else 1.
int verify_exit_code(const std::vector<VerifiedLayout>& rows);

// Runs rows 1..k of `ranked`, `rounds` times each, interleaved (row 1, 2, .., k, then again), so that
// a slow spell of the machine falls on every row alike. `yaml` is the job as written and `keys` the
// assignments that make it the planned job (--set, cluster); each row adds its layout's and the
// short run's own: `steps` steps, metrics to a scratch file, no checkpoints, no evaluation, no trace.
std::vector<VerifiedLayout> verify_layouts(const std::string& yaml, const std::vector<std::string>& keys,
                                           const std::vector<plan::RankedLayout>& ranked, int k, bool experts,
                                           int steps, int rounds);

// The plan's choice (row 1) against the row measured fastest (the least measured_s), round by
// round: the median of row 1's step over that row's in each round. The rows of a round run back to
// back, so a drift of the machine between rounds cancels, which the medians of each row's rounds
// do not do. 1 when row 1 is the fastest; nullopt when row 1 failed.
std::optional<double> choice_over_fastest(const std::vector<VerifiedLayout>& rows);

// The table for the terminal: each row's predicted and measured step and which ran fastest.
std::string verify_table(const std::vector<VerifiedLayout>& rows);

}  // namespace ptrain::app
