// What a step cost, as its record reports it (StepMetrics): the pipeline's bubble, each axis's
// bytes and seconds, and the compute, each the most over the ranks. StepPhase
// measures one step's pipeline phase; StepAccounting keeps what the previous report counted, so
// that a report holds what was sent since (ZeRO's gathers after an update count in the next step)
// and none of the evaluations' traffic.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/comm/comm.h"
#include "engine/comm/parallel_groups.h"
#include "engine/pipeline/simulator.h"
#include "engine/runtime/device_interval.h"
#include "engine/train/metrics.h"
#include "kernels/ops.h"

namespace ptrain::train {

struct StepCosts {
  // pp > 1: the pipeline's bubble (pipeline/simulator.h's definition, measured: the longest schedule
  // is the makespan; a rank's busy time is its schedule less its waits for messages; the bubble is
  // that of the rank busiest), with its rank numbered in the pp group.
  std::optional<pipeline::Bubble> pipeline_bubble;
  std::optional<PerAxis> comm_bytes;    // world > 1: what each axis sent, the most over the ranks
  std::optional<PerAxis> comm_seconds;  // world > 1: the seconds inside each axis's calls (under
                                        // NCCL the compute stream's waits on them), alike
  double compute_seconds = 0;           // the busiest rank's pipeline phase outside its calls (on
                                        // CUDA the device's time less its waits, not the host's issuing)
  SlowestRank slowest_rank;             // the same compute of each rank, the slowest against its
                                        // stage's median (one rank: itself)
};

// One step's pipeline phase: the schedule's forward and backward, then the gradients' last
// reductions, timed by the host's clock, by the device's where the backend keeps a timeline, and
// in the calls this rank made. Construction starts it.
class StepPhase {
 public:
  StepPhase(const kernels::Ops& ops, const dist::Comm& comm, const dist::ParallelGroups& groups);
  StepPhase(const StepPhase&) = delete;
  StepPhase& operator=(const StepPhase&) = delete;

  // The schedule has run, its messages having kept this rank waiting `waited` seconds.
  void pipeline_ended(double waited);
  // Runs the gradients' last reductions (`finish`), which end the phase.
  template <typename Finish>
  void reduce(Finish&& finish) {
    reducing_.emplace(ops_);
    finish();
    reducing_->end();
    ended();
  }

 private:
  friend class StepAccounting;
  using Clock = std::chrono::steady_clock;
  void ended();

  const kernels::Ops& ops_;
  const dist::Comm& comm_;
  const dist::ParallelGroups& groups_;
  PerAxis spent_at_start_;  // world > 1: seconds_in_calls() when the phase began
  Clock::time_point start_;
  runtime::DeviceInterval on_device_;  // the schedule, as the device ran it
  std::uint64_t waits_from_;           // the compute stream's waits from here on are the phase's
  double waited_ = 0, pipeline_seconds_ = 0;
  std::optional<runtime::DeviceInterval> reducing_;  // the last reductions, as the device ran them
  std::uint64_t waits_to_ = 0;
  double phase_seconds_ = 0;
  PerAxis spent_in_pipeline_;  // world > 1: the seconds inside each axis's calls during the phase
};

class StepAccounting {
 public:
  // `comm` and `groups` outlive it.
  StepAccounting(dist::Comm& comm, const dist::ParallelGroups& groups) : comm_(comm), groups_(groups) {}

  // The costs of the step whose phase ended (the host having waited for the device since, as the
  // gradient norm does), the most over the ranks: a world collective where world > 1.
  // `messages_wait_on_host`: whether the host's clock sees the pipeline's message waits.
  StepCosts costs(StepPhase& phase, bool messages_wait_on_host);

  // Runs `work` and returns its seconds outside this rank's collective calls: the update's own time.
  // Host collectives (Gloo) run ZeRO's parameter gathers inside the update; they are the dp axis's
  // time, which the next step's report counts, so the optimizer's time leaves them out (it counted
  // them twice before: the demo's optimizer row read 5.55x its prediction, since then 0.66x).
  template <typename Work>
  double seconds_outside_calls(Work&& work) {
    const auto start = std::chrono::steady_clock::now();
    const PerAxis spent = comm_.world() > 1 ? spent_so_far() : PerAxis{};
    work();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return comm_.world() > 1 ? std::max(0.0, seconds - (spent_so_far() - spent).total()) : seconds;
  }

  // Runs `evaluate`, whose traffic is no step's: the next step's report leaves it out.
  template <typename Evaluate>
  auto leave_out(Evaluate&& evaluate) {
    const PerAxis sent = sent_so_far(), spent = spent_so_far();
    auto result = evaluate();
    sent_before_ += sent_so_far() - sent;
    spent_before_ += spent_so_far() - spent;
    return result;
  }

 private:
  // What this rank has sent on each axis's groups since the start (dp: ZeRO's, the experts' too).
  PerAxis sent_so_far() const;
  // The seconds this rank has spent inside each axis's calls since the start.
  PerAxis spent_so_far() const;

  dist::Comm& comm_;
  const dist::ParallelGroups& groups_;
  PerAxis sent_before_;   // sent_so_far() at the previous step's report, plus evaluations' traffic since
  PerAxis spent_before_;  // spent_so_far() alike
};

}  // namespace ptrain::train
