#include "engine/train/step_accounting.h"

#include <algorithm>
#include <vector>

#include "engine/train/axis_accounting.h"
#include "engine/train/stragglers.h"

namespace ptrain::train {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StepPhase::StepPhase(const kernels::Ops& ops, const dist::Comm& comm, const dist::ParallelGroups& groups)
    : ops_(ops),
      comm_(comm),
      groups_(groups),
      spent_at_start_(comm.world() > 1 ? seconds_in_calls(comm, groups) : PerAxis{}),
      start_(Clock::now()),
      on_device_(ops),
      waits_from_(comm.device_wait_mark()) {}

void StepPhase::pipeline_ended(double waited) {
  on_device_.end();
  pipeline_seconds_ = seconds_since(start_);
  waited_ = waited;
}

void StepPhase::ended() {
  waits_to_ = comm_.device_wait_mark();
  phase_seconds_ = seconds_since(start_);
  if (comm_.world() > 1) spent_in_pipeline_ = seconds_in_calls(comm_, groups_) - spent_at_start_;
}

PerAxis StepAccounting::sent_so_far() const { return bytes_sent(comm_, groups_); }
PerAxis StepAccounting::spent_so_far() const { return seconds_in_calls(comm_, groups_); }

StepCosts StepAccounting::costs(StepPhase& phase, bool messages_wait_on_host) {
  StepCosts out;
  if (comm_.world() == 1) {
    // The pipeline phase as the device ran it (CUDA), else as the host did. Not with peers: their
    // compute stream also waits on messages (NCCL) the host's clock does not see, so the device's
    // span less the host's seconds in calls would count those waits as compute.
    out.compute_seconds = phase.on_device_.seconds().value_or(phase.pipeline_seconds_);
    out.slowest_rank = {0, out.compute_seconds, out.compute_seconds};
    return out;
  }
  const PerAxis sent = sent_so_far(), bytes = sent - sent_before_;
  const PerAxis spent = spent_so_far(), seconds = spent - spent_before_;
  // This rank's compute: its pipeline phase outside the calls it made in it. Where the compute
  // stream waits for collectives and messages (NCCL), the host only issued them: then the device's
  // pipeline phase less the compute stream's waits in it, and each axis's time is its waits (the
  // host has waited for the device since, so settling them waits for nothing).
  double computed = phase.phase_seconds_ - phase.spent_in_pipeline_.total();
  // The schedule's span on this rank, and its busy time there: the span less its waits for messages.
  double pipeline = phase.pipeline_seconds_, waited = phase.waited_;
  PerAxis axis_seconds = seconds;
  const std::optional<double> device_seconds = phase.on_device_.seconds(),
                              device_reducing = phase.reducing_ ? phase.reducing_->seconds() : std::nullopt;
  const auto waits = comm_.settle_device_waits(phase.waits_to_);
  const bool timed_on_device = waits && device_seconds && device_reducing;
  if (timed_on_device) {
    axis_seconds = device_waits(*waits, phase.waits_from_, groups_);
    computed = *device_seconds + *device_reducing - axis_seconds.total();
    dist::ParallelGroups stages;  // the pipeline's messages alone, not the tied embedding's sum
    stages.pp = groups_.pp;
    pipeline = *device_seconds, waited = device_waits(*waits, phase.waits_from_, stages).pp;
  }
  // Every rank's figures: the step reports the most over the ranks of each, and the pipeline's bubble
  // as the simulator defines it (pipeline/simulator.h), from measured times: the longest schedule is
  // the makespan, the bubble that of the rank busiest in it.
  constexpr std::size_t kFields = 14;
  const auto world = static_cast<std::size_t>(comm_.world());
  std::vector<double> all(kFields * world);
  const double mine[kFields] = {bytes.tp, bytes.pp, bytes.dp, bytes.cp, bytes.ep,
                                axis_seconds.tp, axis_seconds.pp, axis_seconds.dp, axis_seconds.cp, axis_seconds.ep,
                                std::max(0.0, computed), pipeline, std::max(0.0, pipeline - waited),
                                groups_.pp != nullptr ? static_cast<double>(groups_.pp->index) : 0.0};
  const auto me = static_cast<std::size_t>(comm_.world_group().index);
  std::copy(mine, mine + kFields, all.begin() + static_cast<std::ptrdiff_t>(kFields * me));
  sent_before_ = sent;
  spent_before_ = spent;
  comm_.all_gather(comm_.world_group(), all.data(), kFields, dist::ElemType::F64);
  double most[kFields] = {};
  std::vector<double> busy(world), compute(world);
  std::vector<int> stage(world);
  for (std::size_t r = 0; r < world; ++r) {
    for (std::size_t f = 0; f < kFields; ++f) most[f] = std::max(most[f], all[kFields * r + f]);
    busy[r] = all[kFields * r + 12];
    compute[r] = all[kFields * r + 10];
    stage[r] = static_cast<int>(all[kFields * r + 13]);
  }
  out.slowest_rank = slowest_rank(compute, stage);
  if (groups_.pp != nullptr && (messages_wait_on_host || timed_on_device)) {
    pipeline::Bubble bubble = pipeline::bubble_of(busy, most[11]);
    bubble.rank = static_cast<int>(all[kFields * static_cast<std::size_t>(bubble.rank) + 13]);  // its pp rank
    out.pipeline_bubble = bubble;
  }
  out.comm_bytes = PerAxis{most[0], most[1], most[2], most[3], most[4]};
  out.comm_seconds = PerAxis{most[5], most[6], most[7], most[8], most[9]};
  out.compute_seconds = most[10];
  return out;
}

}  // namespace ptrain::train
