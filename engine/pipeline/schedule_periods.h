// Internal to engine/pipeline (schedule_model.h): where a schedule's lists repeat period by period,
// and the state of a simulated run at a cut through them.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "engine/pipeline/channels.h"
#include "engine/pipeline/schedule.h"
#include "engine/pipeline/simulator.h"

namespace ptrain::pipeline::detail {

// The lists of m0 + j*k microbatches (j >= 1) are, on every rank, a prefix, j blocks (each the one
// before renumbered k microbatches later) and a tail (renumbered with the last block).
struct Periods {
  int m0 = 0, k = 1;
  std::vector<std::size_t> first_block;  // per rank: the index where the first block begins
  std::vector<std::size_t> block;        // per rank: instructions per block
  // Per rank: the index after j blocks.
  std::vector<std::size_t> cut(int j) const;
};

// From the schedules of m0, m0+k and m0+2k microbatches: where each rank's lists take a block in,
// at cuts that split no F&B pair and that no message crosses backwards (a receive before the cut
// whose send is after it), as late as that allows; nothing where the lists are not so.
std::optional<Periods> find_periods(const Schedule& at0, const Schedule& at1, const Schedule& at2, int k);

// Whether `longer` (m0 + n*k microbatches, n >= 1) is `one_block`'s (m0 + k) prefix, n blocks and
// tail, as `periods` says.
bool repeats(const Schedule& longer, const Schedule& one_block, const Periods& periods);

// A clean cut through a schedule: before index at[r] of every rank's list, splitting no F&B pair,
// with no message crossing it backwards (a receive before it whose send is after it); then what runs
// after it depends on what ran before only through the state there. `crossing`: per channel, the
// sends before it received after it, oldest first, as (rank, index).
struct Cut {
  std::vector<std::size_t> at;
  std::vector<std::vector<std::pair<int, std::size_t>>> crossing;
};
// For each of `cuts` (each an `at`): the cut, or nothing where it is not clean. One pass over the
// lists for all of them.
std::vector<std::optional<Cut>> clean_cuts(const Schedule& s, const ChannelIndex& channel,
                                           const std::vector<std::vector<std::size_t>>& cuts);

// The state of a run at a clean cut: every rank's clock, and the issue times of the messages
// crossing it.
struct CutState {
  std::vector<double> clocks;
  std::vector<std::vector<double>> in_flight;
};
CutState state_at(const Cut& cut, const InstructionTimes& times);

// Whether `after` is `before` later by one shift on every component (to rounding).
bool later_by_one_shift(const CutState& before, const CutState& after);
// Whether `after` - `before` is `shift` (to rounding).
bool same_shift(double before, double after, double shift);

}  // namespace ptrain::pipeline::detail
