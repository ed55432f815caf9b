// Internal to engine/pipeline: the message channels of a schedule. A channel is (sender,
// receiver, payload); messages on one channel are matched in FIFO order (schedule.h).
#pragma once

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline::detail {

inline bool carries_activation(Op op) {
  return op == Op::SendAct || op == Op::RecvAct;
}

inline int channel_count(int pp) {
  return pp * pp * 2;
}

// Index of the channel a send or receive uses; `self` is the pp rank whose list holds the op.
inline int channel_of(const Instr& instr, int self, int pp) {
  const int from = is_send(instr.op) ? self : instr.peer;
  const int to = is_send(instr.op) ? instr.peer : self;
  return (from * pp + to) * 2 + (carries_activation(instr.op) ? 0 : 1);
}

}  // namespace ptrain::pipeline::detail
