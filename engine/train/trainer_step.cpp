// One step of Trainer::State: the schedule's forward and backward, the gradients' reduction, their
// norm and clip, the update, and what the step's record reports; validation; the stop every rank
// agrees on.
#include <cmath>

#include "engine/train/fault_injection.h"
#include "engine/train/trainer_state.h"

namespace ptrain::train {

Trainer::State::StepOutcome Trainer::State::train_step(std::int64_t step, double lr) {
  zero.begin_step(train_loader.microbatches());
  StepPhase phase(ops, comm, groups);  // clocks, device markers and call counters from here
  pipeline.weights_changed();  // by the last update (FP8 weight codes are cast again)
  slow_down(options, comm.rank(), step + 1);  // PTRAIN_DEBUG_FAULT's straggler: inside the measured compute
  phase.pipeline_ended(pipeline.train(
      [&](int mb, std::int32_t* tokens, std::int32_t* labels) { train_loader.load_microbatch(step, mb, tokens, labels); },
      static_cast<float>(1.0 / tokens_per_step()), loss_sums, zero));
  // The gradients' last reductions (and the tied embedding's sum) belong to the measured phase:
  // what they leave exposed is the dp time validate predicts. The norm below would finish them anyway.
  phase.reduce([&] { zero.finish_reductions(); });
  StepOutcome out;
  out.grad_norm = global_norm.compute();  // waits for the device: the losses are there now too
  record_fp8_amaxes(out.grad_norm);
  out.costs = accounting.costs(phase, pipeline.messages_wait_on_host());  // the most over the ranks
  out.loss = global_loss();
  // Agreed while the host waits anyway: after the update a host collective would wait (on NCCL)
  // behind the parameter gathers that the next forward overlaps.
  out.stop = stop_agreed(step + 1);
  if (trace) trace->resolve_device();  // the device is past this step's pipeline (the norm waited)
  if (std::isfinite(out.grad_norm)) out.optimizer_seconds = update(step, lr, out.grad_norm);
  return out;
}

// train.fp8.scaling delayed: the step's amaxes join the histories, the most over every rank (tp/cp
// shards, dp replicas, pp stages). A skipped update's are not history (the norm is every rank's).
void Trainer::State::record_fp8_amaxes(double grad_norm) {
  if (!fp8_history) return;
  if (!std::isfinite(grad_norm)) return fp8_history->discard_step();
  fp8_history->end_step([&](float* v, std::int64_t n) {
    comm.all_reduce(comm.world_group(), v, static_cast<std::size_t>(n), dist::ReduceOp::Max);
  });
}

// The step's loss: the mean over the global batch's tokens (a world collective).
double Trainer::State::global_loss() {
  double loss_sum = holds_loss() ? loss_sums.read_sum(train_loader.microbatches()) : 0.0;
  comm.all_reduce(comm.world_group(), &loss_sum, 1);
  return loss_sum / tokens_per_step();
}

// AdamW on the clipped gradients (step `step` + 1 of the schedule); returns this rank's seconds
// outside collective calls (StepAccounting::seconds_outside_calls).
double Trainer::State::update(std::int64_t step, double lr, double grad_norm) {
  const dist::Trace::Scope span(trace.get(), "optimizer", "optimizer");
  const std::uint64_t from = trace ? trace->mark() : 0;
  const double seconds = accounting.seconds_outside_calls(
      [&] { zero.step(lr, step + 1, GradNorm::clip_factor(grad_norm, spec.train.grad_clip)); });
  if (trace) trace->add_device("optimizer", "optimizer", from, trace->mark());
  return seconds;
}

double Trainer::State::validation_loss(const Evaluation::Batches& batches) {
  const dist::Trace::Scope span(trace.get(), "validation", "validation");
  zero.publish_update();  // the step's traffic, counted in the next step's
  pipeline.weights_changed();
  return accounting.leave_out([&] {
    const double loss = evaluation->loss(batches, loss_sums);
    if (fp8_history) fp8_history->discard_step();  // what the evaluation's casts recorded
    return loss;
  });
}

// Whether any rank wants to stop once `steps_done` steps are done (all ranks must stop at the
// same step boundary). Once rank 0 has lost a record (a full disk) every rank throws instead, exit
// 1: save() and run() ask too, so that no checkpoint is committed after the loss. In the same
// reduction every rank says whether it is still writing a background save (checkpoint.async): once
// none is, every rank finishes it here (rank 0 commits it), at the same point.
bool Trainer::State::stop_agreed(std::int64_t steps_done) {
  const bool after = options.stop_after_steps > 0 && steps_done - start_step >= options.stop_after_steps;
  std::int64_t votes[2] = {after || (options.stop_requested != nullptr && options.stop_requested->load()) ? 1 : 0,
                           background && background->writing() ? 1 : 0};
  if (log && log->failure()) votes[0] = 2;
  comm.all_reduce(comm.world_group(), votes, 2, dist::ReduceOp::Max);
  if (votes[0] == 2) throw records_lost_error(log.get(), spec.checkpoint.dir, last_saved_step, steps_done);
  if (background && background->in_flight() && votes[1] == 0) finish_save(background->take());
  return votes[0] != 0;
}

}  // namespace ptrain::train
