// Internal to engine/pipeline: one builder per schedule kind, and RankProgram, which wraps every
// compute op in the sends and receives it needs, so that builders only decide the compute order.
#pragma once

#include <utility>
#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline::detail {

using RankLists = std::vector<std::vector<Instr>>;

// Appends one pp rank's instructions: F with RecvAct right before and SendAct right after, B with
// RecvGrad before and SendGrad after, each omitted at the ends of the virtual pipeline and where
// the neighbouring stage is on this rank too (a local hop).
class RankProgram {
 public:
  RankProgram(config::StagePlacement placement, int rank) : placement_(placement), rank_(rank) {}
  void forward(int microbatch, int chunk, bool opens_pair = false);  // opens_pair: Instr::overlapped
  void backward(int microbatch, int chunk);
  void weight_grad(int microbatch, int chunk);
  std::vector<Instr> take() { return std::move(instrs_); }

 private:
  config::StagePlacement placement_;
  int rank_;
  std::vector<Instr> instrs_;
};

// Megatron's order of a rank's chunks (interleaved 1F1B; with vpp = 1, plain 1F1B's): the k-th
// forward and the k-th backward of every rank, k = 0 .. microbatches*vpp-1, walking groups of pp
// microbatches per chunk.
struct Slot {
  int microbatch = 0;
  int chunk = 0;
};
inline Slot megatron_forward(int k, int pp, int vpp) {
  return {k / (pp * vpp) * pp + k % pp, k / pp % vpp};
}
inline Slot megatron_backward(int k, int pp, int vpp) {
  return {k / (pp * vpp) * pp + k % pp, vpp - 1 - k / pp % vpp};
}

RankLists build_gpipe(int pp, int microbatches);
RankLists build_1f1b(int pp, int microbatches);
RankLists build_interleaved_1f1b(int pp, int vpp, int microbatches);
// 1f1b or interleaved-1f1b's forwards and backwards in Megatron's order, each rank holding at most
// max_in_flight*vpp chunks (schedule_capped.cpp). Precondition: max_in_flight >=
// config::least_in_flight(pp, vpp).
RankLists build_capped_1f1b(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight);
RankLists build_zb_h1(int pp, int microbatches);
RankLists build_zbv(int pp, int microbatches);
RankLists build_dualpipev(int pp, int microbatches);

}  // namespace ptrain::pipeline::detail
