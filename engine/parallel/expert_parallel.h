// Expert parallelism (GShard; Megatron-LM's expert-parallel all-to-all): the ep ranks of a group
// each hold E/ep consecutive experts of every MoE layer and route their own tokens. A layer's
// experts' buffers are cut into ep blocks, block j holding the slots of rank j's experts
// (model/moe_block.h lays experts out contiguously), and one all-to-all sends block j to rank j:
// what a rank receives, in source-rank order, is its experts' tokens from every rank of the group.
// The same exchange, with the roles swapped, returns the experts' outputs and, in backward, moves
// the gradients both ways.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/parallel/staged_collectives.h"
#include "kernels/ops.h"

namespace ptrain::parallel {

class ExpertParallel {
 public:
  ExpertParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& ep);

  int size() const { return ep_.size(); }
  int rank() const { return ep_.index; }

  // Block j (`block` elements from j * block) of `send` to rank j, whose block i of `recv` it
  // becomes (i: this rank); both buffers hold size() blocks of one float dtype and do not overlap.
  void exchange(kernels::Buf send, kernels::Buf recv, std::int64_t block);

 private:
  dist::Comm& comm_;
  const dist::Group& ep_;
  StagedCollectives staged_;  // via host copies where the Comm cannot reach the backend's memory
};

}  // namespace ptrain::parallel
