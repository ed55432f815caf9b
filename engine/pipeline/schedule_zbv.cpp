// ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 6; TorchTitan's
// ScheduleZBVZeroBubble): two model chunks per rank in the V shape (config/stage_placement.h: rank
// r holds stages r and 2pp-1-r), and the backward split into B (input grad) and W (weight grad).
// The V keeps every rank's work in step — each rank holds one early and one late stage, and the
// turn on rank pp-1 needs no message — so with the memory of 1F1B (pp microbatches of a full stage,
// i.e. 2pp chunks between F and W) the W's fill every bubble but the ramp.
//
// Built, like zb-h1, by list-scheduling the pipeline with unit costs (F = B = W = 1 per chunk, no
// latency) and emitting the order in which each rank ran its ops. A free rank takes, in this order
// of preference:
//   1. F of chunk 1, then of chunk 0, once its input has arrived, if fewer than 2pp chunks of
//      microbatches sit between their F and their W: chunk 1 first, since it is nearer the loss;
//   2. B of chunk 0, then of chunk 1, once its output grad has arrived: chunk 0 first, since its B
//      ends a microbatch's backward on this rank (and on rank pp-1 it takes the grad chunk 1 just
//      handed over, so the two B's of a microbatch follow each other there: the executor relies
//      on it);
//   3. W of the oldest B not yet followed by its W.
// With unit costs every rank finishes at 6m + pp - 1 once m >= 2pp (and at m = pp): the bubble is
// the ramp alone, the pp-1 forwards rank pp-1 waits for before its first op, against 1F1B's
// (pp-1)(F+B+W) of a full stage (tests/pipeline check both, and the memory bound, over sweeps).
#include <array>
#include <cassert>
#include <deque>
#include <limits>
#include <utility>

#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {
namespace {

constexpr int kNever = std::numeric_limits<int>::max();

struct RankState {
  std::array<int, 2> next_forward{}, next_backward{};
  std::array<std::vector<int>, 2> forward_done, backward_done;  // per chunk, per microbatch: end time
  std::deque<std::pair<int, int>> weight_grads;                 // (microbatch, chunk) of B's awaiting W
  int live = 0;                                                 // chunks with F done, W not yet
  int weight_grads_done = 0;
};

}  // namespace

RankLists build_zbv(int pp, int microbatches) {
  const config::StagePlacement place = config::StagePlacement::of(config::ScheduleKind::Zbv, pp, 2);
  std::vector<RankState> state(pp);
  for (RankState& s : state)
    for (int c = 0; c < 2; ++c) {
      s.forward_done[c].assign(microbatches, kNever);
      s.backward_done[c].assign(microbatches, kNever);
    }
  std::vector<RankProgram> programs;
  for (int rank = 0; rank < pp; ++rank) programs.emplace_back(place, rank);

  // When the input of F(mb, chunk) on `rank` is there: the previous stage's F has ended.
  auto input_at = [&](int rank, int chunk, int mb) {
    if (place.first(rank, chunk)) return 0;
    const config::StageHolder prev = place.holder(place.virtual_stage(rank, chunk) - 1);
    return state[prev.rank].forward_done[prev.chunk][mb];
  };
  // When the output grad of B(mb, chunk) is there: the next stage's B (the loss: this F) has ended.
  auto grad_at = [&](int rank, int chunk, int mb) {
    if (place.last(rank, chunk)) return state[rank].forward_done[chunk][mb];
    const config::StageHolder next = place.holder(place.virtual_stage(rank, chunk) + 1);
    return state[next.rank].backward_done[next.chunk][mb];
  };

  int finished = 0;
  for (int t = 0; finished < pp; ++t) {
    assert(t <= 6 * (microbatches + pp));  // past 1F1B's makespan the rules would have stalled
    finished = 0;
    for (int rank = 0; rank < pp; ++rank) {
      RankState& s = state[rank];
      if (s.weight_grads_done == 2 * microbatches) {
        ++finished;
        continue;
      }
      // With unit costs every op this rank started has ended by t: it is free.
      bool busy = false;
      for (int chunk : {1, 0}) {
        const int mb = s.next_forward[chunk];
        if (busy || mb == microbatches || s.live >= 2 * pp || input_at(rank, chunk, mb) > t) continue;
        s.forward_done[chunk][mb] = t + 1;
        ++s.next_forward[chunk];
        ++s.live;
        programs[rank].forward(mb, chunk);
        busy = true;
      }
      for (int chunk : {0, 1}) {
        const int mb = s.next_backward[chunk];
        if (busy || mb == s.next_forward[chunk] || grad_at(rank, chunk, mb) > t) continue;
        s.backward_done[chunk][mb] = t + 1;
        ++s.next_backward[chunk];
        s.weight_grads.emplace_back(mb, chunk);
        programs[rank].backward(mb, chunk);
        busy = true;
      }
      if (!busy && !s.weight_grads.empty()) {
        const auto [mb, chunk] = s.weight_grads.front();
        s.weight_grads.pop_front();
        --s.live;
        ++s.weight_grads_done;
        programs[rank].weight_grad(mb, chunk);
      }
    }
  }
  RankLists ranks;
  for (RankProgram& program : programs) ranks.push_back(program.take());
  return ranks;
}

}  // namespace ptrain::pipeline::detail
