// 1F1B and interleaved 1F1B under a cap on the microbatches in flight (schedule.max_in_flight).
// Interleaved 1F1B's warm-up keeps (pp-r-1)*2 + (vpp-1)*pp + 1 chunks of activations on rank r,
// (3pp-1)/2 microbatches on rank 0 at vpp 2 against 1F1B's pp; Llama 3's paper describes tuning
// its interleaved schedule for communication and memory ("Pipeline parallelism improvements",
// arXiv:2407.21783) without saying how many it holds. Cutting the warm-up short alone does not do
// it: rank r's steady "forward, then backward" then waits on a backward that is not there yet while
// the ranks after it wait on its forwards (measured in the simulator: the bubble of pp 16, vpp 2,
// 32 microbatches went from 27% to 50% at 21 of 24).
//
// So the order here comes from running the pipeline in unit time (a chunk's forward 1, its backward
// 2, messages free) and listing each rank's ops as they ran. Every rank keeps Megatron's order of its
// forwards and of its backwards (megatron_forward/_backward), so every channel carries its
// messages in the same order as uncapped; only how the two interleave changes. Among the ops that
// could start, the earliest runs first; at a tie a forward before a backward, then the lower rank.
// A rank's next forward can start when its input is there and the rank holds fewer than
// max_in_flight*vpp chunks; its next backward when its output gradient is there (at the last stage:
// its own forward). The lists are the order of an execution that finished, so they cannot deadlock
// (check() proves it for every case the tests sweep).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {
namespace {

constexpr std::int64_t kForwardTime = 1, kBackwardTime = 2;
constexpr std::int64_t kNotRun = -1;

struct RankState {
  int forwards = 0, backwards = 0;  // listed so far
  std::int64_t free_at = 0;
};

}  // namespace

RankLists build_capped_1f1b(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight) {
  const config::StagePlacement placement = config::StagePlacement::of(kind, pp, vpp);
  const int total = microbatches * vpp;  // forwards (and backwards) per rank
  // Chunks; a rank never holds more than all its microbatches (and a cap past them cannot overflow).
  const int cap = std::min(max_in_flight, microbatches) * vpp;
  const int last_stage = placement.stages() - 1;
  // End time of each (virtual stage, microbatch)'s forward and backward, kNotRun until listed.
  std::vector<std::int64_t> forward_end(static_cast<std::size_t>(placement.stages()) * microbatches, kNotRun);
  std::vector<std::int64_t> backward_end(forward_end.size(), kNotRun);
  auto at = [&](int stage, int microbatch) { return static_cast<std::size_t>(stage) * microbatches + microbatch; };

  std::vector<RankState> state(static_cast<std::size_t>(pp));
  std::vector<RankProgram> programs;
  for (int rank = 0; rank < pp; ++rank) programs.emplace_back(placement, rank);

  struct Pick {
    std::int64_t start = std::numeric_limits<std::int64_t>::max();
    bool backward = false;
    int rank = -1;
    bool before(std::int64_t s, bool b, int r) const {
      return s != start ? s < start : b != backward ? !b : r < rank;
    }
  };
  for (std::int64_t listed = 0; listed < 2LL * total * pp; ++listed) {
    Pick pick;
    auto consider = [&](std::int64_t ready, bool backward, int rank) {
      if (ready == kNotRun) return;
      const std::int64_t start = std::max(ready, state[static_cast<std::size_t>(rank)].free_at);
      if (pick.before(start, backward, rank)) pick = {start, backward, rank};
    };
    for (int rank = 0; rank < pp; ++rank) {
      const RankState& s = state[static_cast<std::size_t>(rank)];
      if (s.forwards < total && s.forwards - s.backwards < cap) {
        const Slot f = megatron_forward(s.forwards, pp, vpp);
        const int v = placement.virtual_stage(rank, f.chunk);
        consider(v == 0 ? 0 : forward_end[at(v - 1, f.microbatch)], false, rank);
      }
      if (s.backwards < total) {
        const Slot b = megatron_backward(s.backwards, pp, vpp);
        const int v = placement.virtual_stage(rank, b.chunk);
        consider(v == last_stage ? forward_end[at(v, b.microbatch)] : backward_end[at(v + 1, b.microbatch)], true,
                 rank);
      }
    }
    if (pick.rank < 0)
      throw std::logic_error("build_capped_1f1b: no op can start; max_in_flight is below least_in_flight");
    RankState& s = state[static_cast<std::size_t>(pick.rank)];
    const Slot slot = pick.backward ? megatron_backward(s.backwards++, pp, vpp) : megatron_forward(s.forwards++, pp, vpp);
    const std::int64_t end = pick.start + (pick.backward ? kBackwardTime : kForwardTime);
    const int v = placement.virtual_stage(pick.rank, slot.chunk);
    (pick.backward ? backward_end : forward_end)[at(v, slot.microbatch)] = end;
    s.free_at = end;
    RankProgram& program = programs[static_cast<std::size_t>(pick.rank)];
    if (pick.backward)
      program.backward(slot.microbatch, slot.chunk);
    else
      program.forward(slot.microbatch, slot.chunk);
  }
  RankLists ranks;
  for (RankProgram& program : programs) ranks.push_back(program.take());
  return ranks;
}

}  // namespace ptrain::pipeline::detail
