// Pipeline schedules as pure instruction lists: one source of truth for the simulator, the
// schedule drawing and the executor. Virtual stage v = chunk*pp + pp_rank (Megatron placement):
// chunk c of rank r feeds chunk c of rank r+1, and rank pp-1's chunk c feeds rank 0's chunk c+1.
#pragma once

#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::pipeline {

enum class Op {
  Forward,     // F(mb, chunk)
  Backward,    // B(mb, chunk): input grad; also the weight grad unless the schedule splits W
  WeightGrad,  // W(mb, chunk): weight grad (zb-h1 only)
  SendAct,     // activations of F(mb, chunk) to the next virtual stage (peer = its pp rank)
  RecvAct,     // activations for F(mb, chunk) from the previous virtual stage
  SendGrad,    // input grad of B(mb, chunk) to the previous virtual stage
  RecvGrad,    // output grad for B(mb, chunk) from the next virtual stage
};
const char* to_string(Op);

struct Instr {
  Op op;
  int microbatch;
  int chunk;
  int peer = -1;  // pp rank on the other side of a send/recv; -1 for compute
  bool operator==(const Instr&) const = default;
};

struct Schedule {
  config::ScheduleKind kind;
  int pp = 1;
  int vpp = 1;                // virtual stages (model chunks) per pp rank
  int microbatches = 1;
  bool split_weight_grad = false;  // true when W is its own instruction (zb-h1)
  std::vector<std::vector<Instr>> ranks;  // ranks[pp_rank] = instruction list in execution order
};

// Problems with the arguments for a kind (e.g. interleaved needs microbatches % pp == 0), each a
// sentence; empty when build() accepts them.
std::vector<std::string> build_problems(config::ScheduleKind kind, int pp, int vpp, int microbatches);
// Precondition: build_problems(...) is empty.
Schedule build(config::ScheduleKind kind, int pp, int vpp, int microbatches);

}  // namespace ptrain::pipeline
