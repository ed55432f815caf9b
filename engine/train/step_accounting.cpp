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

double sum(const PerAxis& a) { return a.tp + a.pp + a.dp + a.cp + a.ep; }

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
  // The most over the ranks: pipeline idle, each axis's bytes and seconds.
  const PerAxis sent = sent_so_far(), bytes = sent - sent_before_;
  const PerAxis spent = spent_so_far(), seconds = spent - spent_before_;
  // This rank's compute: its pipeline phase outside the calls it made in it. Where the compute
  // stream waits for collectives and messages (NCCL), the host only issued them: then the device's
  // pipeline phase less the compute stream's waits in it, and each axis's time is its waits (the
  // host has waited for the device since, so settling them waits for nothing).
  double computed = phase.phase_seconds_ - sum(phase.spent_in_pipeline_);
  double idle = phase.pipeline_seconds_ > 0 ? phase.waited_ / phase.pipeline_seconds_ : 0.0;
  PerAxis axis_seconds = seconds;
  const std::optional<double> device_seconds = phase.on_device_.seconds(),
                              device_reducing = phase.reducing_ ? phase.reducing_->seconds() : std::nullopt;
  const auto waits = comm_.settle_device_waits(phase.waits_to_);
  const bool timed_on_device = waits && device_seconds && device_reducing;
  if (timed_on_device) {
    axis_seconds = device_waits(*waits, phase.waits_from_, groups_);
    computed = *device_seconds + *device_reducing - sum(axis_seconds);
    dist::ParallelGroups stages;  // the pipeline's messages alone, not the tied embedding's sum
    stages.pp = groups_.pp;
    idle = *device_seconds > 0 ? device_waits(*waits, phase.waits_from_, stages).pp / *device_seconds : 0.0;
  }
  double most[12] = {idle,
                     bytes.tp, bytes.pp, bytes.dp, bytes.cp, bytes.ep,
                     axis_seconds.tp, axis_seconds.pp, axis_seconds.dp, axis_seconds.cp, axis_seconds.ep,
                     std::max(0.0, computed)};
  sent_before_ = sent;
  spent_before_ = spent;
  comm_.all_reduce(comm_.world_group(), most, 12, dist::ReduceOp::Max);
  if (groups_.pp != nullptr && (messages_wait_on_host || timed_on_device)) out.pipeline_idle = most[0];
  out.comm_bytes = PerAxis{most[1], most[2], most[3], most[4], most[5]};
  out.comm_seconds = PerAxis{most[6], most[7], most[8], most[9], most[10]};
  out.compute_seconds = most[11];
  // Each rank's compute and pipeline stage: the slowest rank against its stage's median.
  const auto world = static_cast<std::size_t>(comm_.world()), me = static_cast<std::size_t>(comm_.world_group().index);
  std::vector<double> all(2 * world);
  all[2 * me] = std::max(0.0, computed);
  all[2 * me + 1] = groups_.pp != nullptr ? static_cast<double>(groups_.pp->index) : 0.0;
  comm_.all_gather(comm_.world_group(), all.data(), 2, dist::ElemType::F64);
  std::vector<double> compute(world);
  std::vector<int> stage(world);
  for (std::size_t r = 0; r < world; ++r) {
    compute[r] = all[2 * r];
    stage[r] = static_cast<int>(all[2 * r + 1]);
  }
  out.slowest_rank = slowest_rank(compute, stage);
  return out;
}

}  // namespace ptrain::train
