// The schedule executor: runs one pp rank's instruction list (pipeline::build) for a training step,
// in list order, deciding what the list implies and nothing else: which activation slot each
// microbatch of a chunk holds from its F until its gradients are written (its B, or its W when the
// schedule splits weight gradients), which send buffer each message leaves from, and when a
// buffer's send is known to be over so the buffer can be reused (pipeline::rank_buffers, which
// validate counts too). The work itself — compute on a device, messages over a Comm — is a
// StageWork's: train::PipelineStage does it for a run, tests record it.
//
// Pure, like the rest of pipeline/ (no devices, no communication, no threads).
#pragma once

#include <vector>

#include "engine/pipeline/buffers.h"
#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline {

// What a rank does at each instruction. `slot`: the chunk's activation slot of the microbatch (under
// a cap on the microbatches in flight, one of the slots the rank's chunks share:
// RankBuffers::shared_slots);
// `buffer`: the send buffer a message leaves from (0 .. RankBuffers::send_buffers - 1).
class StageWork {
 public:
  virtual ~StageWork() = default;
  virtual void receive_activation(int chunk, int slot, int peer) = 0;  // into the slot's input
  virtual void forward(int chunk, int slot, int microbatch) = 0;
  virtual void send_activation(int chunk, int slot, int buffer, int peer) = 0;  // started, not awaited
  virtual void receive_gradient(int chunk, int peer) = 0;  // into the chunk's backward workspace
  virtual void backward(int chunk, int slot, int microbatch) = 0;
  virtual void weight_grad(int chunk, int slot, int microbatch) = 0;
  virtual void send_gradient(int chunk, int buffer, int peer) = 0;  // started, not awaited
  // The hop between two chunks of this rank (the V's turn), what a send and a receive do elsewhere:
  // the output of `from_chunk`'s F just run into the input of `chunk`'s slot for the same microbatch.
  virtual void pass_activation(int from_chunk, int from_slot, int chunk, int slot) = 0;
  // The input grad of `from_chunk`'s B (the rank's last) to `chunk`'s B about to run.
  virtual void pass_gradient(int from_chunk, int chunk) = 0;
  // The send from `buffer` is over (waits for it if it is not yet): the buffer may be reused.
  virtual void wait_send(int buffer) = 0;
};

class ScheduleExecutor {
 public:
  // Throws std::logic_error when the list breaks what the executor relies on: every message right
  // beside its compute op (RecvAct F SendAct, RecvGrad B SendGrad), in every chunk the last
  // microbatch the last to have its gradients written (ZeRO 0/1 reduce a unit then), and across a
  // hop within the rank each B of the later chunk followed by the earlier chunk's B of the same
  // microbatch before the next (the later chunk keeps one input grad at a time).
  ScheduleExecutor(Schedule schedule, int pp_rank);

  const Schedule& schedule() const { return schedule_; }
  const RankBuffers& buffers() const { return buffers_; }
  // The op after which a microbatch's gradients are all written (W when the schedule splits them).
  Op gradients_done() const { return schedule_.split_weight_grad ? Op::WeightGrad : Op::Backward; }

  // One step: every instruction of the rank's list, then a wait for every send still in flight.
  void run(StageWork& work);

 private:
  Schedule schedule_;
  int pp_rank_;
  RankBuffers buffers_;
};

}  // namespace ptrain::pipeline
