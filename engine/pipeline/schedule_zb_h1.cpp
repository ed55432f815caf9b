// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", the memory-bounded handcrafted
// schedule). The backward is split into B (input grad, on the critical path between stages) and W
// (weight grad, needed by nobody until the optimizer step), and the W's fill the bubbles that 1F1B
// leaves in its cooldown.
//
// Built by list-scheduling the pipeline with unit costs (F = B = W = 1, no latency) and emitting
// the order in which each rank ran its ops. A free rank r takes, in this order of preference:
//   1. F of its next microbatch, if the activation has arrived, fewer than pp-r microbatches sit
//      between F and B (1F1B's activation bound) and fewer than pp sit between F and W;
//   2. B of its oldest forwarded microbatch, once the output grad has arrived (last stage: at once);
//   3. W of its oldest microbatch whose B is done.
// F goes first because it has the longest chain of work behind it; preferring B instead lets the
// late stages run ahead and starve later. Phases that come out of it:
//   warmup:   pp-r forwards;
//   steady:   rank 0 runs B, W, F; the last rank runs F, B and lets W lag pp-1 microbatches
//             behind; ranks in between lag in proportion;
//   cooldown: the last B's with the W's left behind draining after them.
// With unit costs every rank finishes at 3m + pp - 1: a bubble of (pp-1)(F+B-W) against 1F1B's
// (pp-1)(F+B+W), with at most pp-r microbatches between F and B on rank r (tests/pipeline check
// both over sweeps).
#include <cassert>
#include <limits>

#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {
namespace {

constexpr int kNever = std::numeric_limits<int>::max();

struct RankState {
  int next_forward = 0, next_backward = 0, next_weight_grad = 0;
  std::vector<int> forward_done, backward_done;  // per microbatch: end time, kNever if not run
};

}  // namespace

RankLists build_zb_h1(int pp, int microbatches) {
  std::vector<RankState> state(pp);
  for (RankState& s : state) {
    s.forward_done.assign(microbatches, kNever);
    s.backward_done.assign(microbatches, kNever);
  }
  std::vector<RankProgram> programs;
  for (int rank = 0; rank < pp; ++rank)
    programs.emplace_back(config::StagePlacement::of(config::ScheduleKind::ZbH1, pp, 1), rank);

  int finished = 0;
  for (int t = 0; finished < pp; ++t) {
    assert(t <= 3 * (microbatches + pp));  // 1F1B's makespan; past it the rules would have stalled
    finished = 0;
    for (int rank = 0; rank < pp; ++rank) {
      RankState& s = state[rank];
      if (s.next_weight_grad == microbatches) {
        ++finished;
        continue;
      }
      // Every op this rank started has ended by t: with unit costs a rank is free at every t.
      const int f = s.next_forward, b = s.next_backward;
      const bool act_arrived = rank == 0 || (f < microbatches && state[rank - 1].forward_done[f] <= t);
      const bool may_forward =
          f < microbatches && act_arrived && f - b < pp - rank && f - s.next_weight_grad < pp;
      const bool grad_arrived =
          b < f && (rank == pp - 1 ? s.forward_done[b] <= t : state[rank + 1].backward_done[b] <= t);
      if (may_forward) {
        s.forward_done[f] = t + 1;
        programs[rank].forward(s.next_forward++, 0);
      } else if (grad_arrived) {
        s.backward_done[b] = t + 1;
        programs[rank].backward(s.next_backward++, 0);
      } else if (s.next_weight_grad < b) {
        programs[rank].weight_grad(s.next_weight_grad++, 0);
      }
    }
  }
  RankLists ranks;
  for (RankProgram& program : programs) ranks.push_back(program.take());
  return ranks;
}

}  // namespace ptrain::pipeline::detail
