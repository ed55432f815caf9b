// A schedule of m microbatches as validate's estimate and plan's search use it -- its simulation
// under given costs, what each rank holds, counts over its lists -- at a cost that does not grow
// with m: past its warm-up a schedule repeats, and a long one follows exactly from three short ones.
//
// The lists: of m0 + j*k microbatches (m0 = m mod k past a few warm-ups; k = pp for
// interleaved-1f1b, whose order goes by groups of pp microbatches, schedule.max_in_flight for 1f1b
// under a cap, whose order repeats every so many, else 1) they are, on every rank,
// a prefix, j blocks -- each the one before with its microbatches k later -- and a tail. Found by
// comparing m0, m0+k and m0+2k (schedule_periods.h); the builders keep to it for every j
// (tests/pipeline/schedule_model_test.cpp checks the lists and every number against the full ones).
//
// The times: simulated, a sample of n blocks is in its steady state when the state of its run at the
// cut after its last block -- every rank's clock and the issue time of every message in flight
// across the cut -- is the state q blocks earlier, Λ later on every component (q: the smallest that
// is, up to 2pp microbatches or 4 blocks; more than one where the slowest stages' cycles span
// several microbatches). The simulator's times are maxima of sums of earlier times and costs, so the same
// instructions run from a state Λ later run Λ later: from that cut on, every q blocks end Λ later,
// and the tail follows the last block as it follows it in the sample. So for m the makespan is
// exactly (to rounding) that of the sample with as many blocks mod q, plus Λ per q further blocks;
// each rank's compute time its own plus its blocks'; the peaks (microbatches in flight, activation
// slots, send buffers) the samples', since a block leaves as many in flight as it found. A run not
// yet steady is sampled again twice as long, and where no sample short of m is steady the schedule
// is built and simulated in full.
//
// GPipe runs every forward before any backward, so it has no such blocks; but its makespan is
// affine in m from one microbatch on -- the longest path through its grid of forwards and then of
// backwards spends every microbatch but one on the slowest stage of each, (m-1)(max F + max B)
// plus one microbatch through every stage -- and so are its peaks (all m microbatches in flight at
// the turn): it is sampled at 1, 2 and 3 microbatches, each number checked affine over them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/pipeline/buffers.h"
#include "engine/pipeline/schedule.h"
#include "engine/pipeline/schedule_periods.h"
#include "engine/pipeline/simulator.h"

namespace ptrain::pipeline {

class ScheduleModel {
 public:
  // As pipeline::build takes them; its preconditions.
  ScheduleModel(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight = 0);
  // The job's schedule over its microbatches.
  explicit ScheduleModel(const config::JobSpec& spec);

  int microbatches() const { return microbatches_; }
  // Whether the numbers come from samples rather than the lists of all the microbatches.
  bool sampled() const { return !full_; }
  // The full schedule's Schedule::max_in_flight.
  int max_in_flight() const { return max_in_flight_; }
  // rank_buffers of the full schedule, without send_released_after (an index into its lists).
  const std::vector<RankBuffers>& held() const { return held_; }
  // simulate(the full schedule, costs, Timeline::Drop), to rounding.
  SimResult simulate(const OpCosts& costs) const;

  // `count` of the full schedule, where `count` replays the lists through a state that each block's
  // instructions set (what they do not set, they leave as it was), e.g. ZeRO 3's parameter windows:
  // then every block after the first starts from the same state and adds the same counts.
  using Counts = std::vector<std::int64_t>;
  Counts count(const std::function<Counts(const Schedule&)>& count) const;

 private:
  Schedule build_at(int microbatches) const;
  std::optional<SimResult> simulate_gpipe(const OpCosts& costs) const;
  // From a sample of `blocks` blocks: nothing where its run is not steady at its end.
  std::optional<SimResult> simulate_steady(const Schedule& sample, int blocks, const OpCosts& costs) const;
  int blocks() const { return (microbatches_ - periods_.m0) / periods_.k; }

  config::ScheduleKind kind_;
  int pp_, vpp_, microbatches_, cap_;
  int max_in_flight_ = 0;
  std::vector<RankBuffers> held_;
  std::optional<Schedule> full_;  // a short schedule: its lists
  // A long one: m0, m0+k, m0+2k microbatches (gpipe: 1, 2, 3), where the blocks are, and a sample of
  // steady_blocks_ blocks to find the steady state in.
  std::vector<Schedule> samples_;
  detail::Periods periods_;
  Schedule steady_;
  int steady_blocks_ = 0;
};

}  // namespace ptrain::pipeline
