// A schedule of m microbatches as validate's estimate and plan's search use it -- its simulation
// under given costs, what each rank holds, counts over its lists -- at a cost that does not grow
// with m: past its warm-up a schedule repeats, and a long one follows exactly from short ones.
//
// The lists: of m0 + j*k microbatches (m0 = m mod k past a few warm-ups; k = pp for
// interleaved-1f1b, whose order goes by groups of pp microbatches, schedule.max_in_flight for 1f1b
// under a cap, whose order repeats every so many, else 1) they are, on every rank, a prefix, j
// blocks -- each the one before with its microbatches k later -- and a tail. Found by comparing m0,
// m0+k and m0+2k (schedule_periods.h) and checked on every longer sample; the builders keep to it
// for every j (tests/pipeline/schedule_model_test.cpp checks every number against the full lists).
//
// The times: simulated, a sample of n blocks is in its steady state when the state of its run at the
// cut after its last block -- every rank's clock and the issue time of every message in flight
// across the cut -- is the state q blocks earlier, Λ later on every component (q: the smallest that
// is, up to half the sample; more than one where the slowest stages' cycle spans several
// microbatches). The simulator's times are maxima of sums of earlier times and costs, so the same
// instructions run from a state Λ later run Λ later: from that cut on every q blocks end Λ later,
// and the tail follows the last block as it does in the sample. So for m the makespan is exactly (to
// rounding) that of a sample with as many blocks mod q, plus Λ per q further blocks; each rank's
// compute time its own plus its blocks'; the peaks (microbatches in flight, activation slots, send
// buffers) the samples', since a block leaves as many in flight as it found. A run not yet steady,
// or with a longer cycle, is sampled again twice as long (9, 18, 36, ... blocks, the size that
// served last tried first), and where no sample of at most half of m serves, the schedule is built
// and simulated in full.
//
// GPipe runs every forward before any backward, so it has no such blocks; but its makespan is
// affine in m from one microbatch on -- the longest path through its grid of forwards and then of
// backwards spends every microbatch but one on the slowest stage of each, (m-1)(max F + max B)
// plus one microbatch through every stage -- and so are its peaks (all m microbatches in flight at
// the turn): it is sampled at 1, 2 and 3 microbatches, each number checked affine over them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
  // The same schedule over `microbatches`, sharing this one's samples where they serve (plan's
  // search meets one schedule at many microbatch counts).
  ScheduleModel over(int microbatches) const;
  // The job's schedule built in full, however long (what the tests hold the samples to).
  static ScheduleModel in_full(const config::JobSpec& spec);

  int microbatches() const { return microbatches_; }
  // Whether the numbers come from samples rather than the lists of all the microbatches.
  bool sampled() const { return samples_ != nullptr; }
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
  // The cuts after each of a sample's last blocks, the last first (nothing where one is not clean).
  using LastCuts = std::vector<std::optional<detail::Cut>>;
  // A sample of `blocks` blocks (m0 + blocks*k microbatches); the cuts after its last (blocks-1)/2 + 1
  // blocks, where the steady state is looked for, once asked for.
  struct Sample {
    int blocks = 0;
    Schedule lists;
    mutable std::optional<LastCuts> cuts;
  };
  // m0, m0+k, m0+2k microbatches (gpipe: 1, 2, 3), what their ranks hold, where the blocks are, and
  // longer samples by blocks, built as they are needed (plan's search simulates one schedule under
  // many costs) with the size that last found the steady state.
  struct Samples {
    std::vector<Schedule> at;
    std::vector<RankBuffers> held[3];
    detail::Periods periods;
    mutable std::map<int, Sample> by_blocks;
    mutable int probe_blocks = kFirstProbe;
  };
  // Blocks of the first sample the steady state is looked for in: cycles of up to 4 blocks.
  static constexpr int kFirstProbe = 9;
  // Where m microbatches would be sampled, and whether they are enough to.
  struct Plan {
    detail::Periods periods;  // m0 and k
    bool sampled = false;
  };
  Plan sampling(int microbatches) const;
  struct InFull {};
  ScheduleModel(InFull, config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight);
  void build_in_full();
  // From the samples: what each rank holds and the cap, or false where they do not serve.
  bool take(std::shared_ptr<const Samples> samples);
  Schedule build_at(int microbatches) const;
  std::optional<SimResult> simulate_gpipe(const OpCosts& costs) const;
  // The sample of `blocks` blocks, built once; nothing where its lists do not repeat as the periods say.
  const Sample* sample(int blocks) const;
  // From a sample: nothing where its run is not steady at its end.
  std::optional<SimResult> simulate_steady(const Sample& probe, const OpCosts& costs) const;
  int blocks() const { return (microbatches_ - samples_->periods.m0) / samples_->periods.k; }

  config::ScheduleKind kind_;
  int pp_, vpp_, microbatches_, cap_;
  int max_in_flight_ = 0;
  std::vector<RankBuffers> held_;
  std::optional<Schedule> full_;                // a short schedule: its lists
  std::shared_ptr<const Samples> samples_;  // a long one
};

}  // namespace ptrain::pipeline
