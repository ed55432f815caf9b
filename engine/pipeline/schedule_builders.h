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

RankLists build_gpipe(int pp, int microbatches);
RankLists build_1f1b(int pp, int microbatches);
RankLists build_interleaved_1f1b(int pp, int vpp, int microbatches);
RankLists build_zb_h1(int pp, int microbatches);
RankLists build_zbv(int pp, int microbatches);
RankLists build_dualpipev(int pp, int microbatches);

}  // namespace ptrain::pipeline::detail
