// DualPipeV (DeepSeek's DualPipe, "cut in half" into a V by Sea AI Lab; deepseek-ai/DualPipe's
// dualpipev.py): two model chunks per rank in the V shape (config/stage_placement.h), the steady
// phase pairing the forward of one chunk with the backward of the other. DualPipe runs such a pair
// overlapped (one's compute hides the other's all-to-all); the list marks each pair (an F with
// Instr::overlapped, then its B: schedule.h), which this executor runs one op at a time, F then B.
// W is split from B only where the schedule fills a bubble with it (DualPipe's "zero bubble" B's);
// elsewhere W follows its B at once, which is the same work as an unsplit backward, and in a pair
// is part of it (DualPipe's F&B overlaps F with the whole backward).
//
// Phases of rank r of n = pp ranks (F0 = forward of chunk 0, B1 = backward of chunk 1, ...; each
// chunk's microbatches in order; W's taken from a FIFO of the split B's):
//   1. 2(n-r-1) x F0                  fill the V down to rank n-1
//   2. r+1 x (F0 F1)                  both chunks forward; on rank n-1, F1 takes F0's output
//   3. n-r-1 x (B1 split, W, F1)      the first backwards of chunk 1, W filling the wait for F1's input
//   4. m-2n+r+1 x (F0&B1, F1&B0)      steady: two F&B pairs (on rank n-1 the first F0 B1 is not
//                                     one: the reference runs them apart "to further reduce bubble")
//   5. n-r-1 x (B1, F1&B0)            chunk 0 has no forwards left
//   6. r+1 x (B1, B0)                 the second half of these B's split (from the middle on)
//   7. n-r-1 x (W, B0 split)
//   8. r+1 x W                        drain
// It needs m >= 2n microbatches (phase 4 runs at least once on rank 0). With uniform costs and each
// pair timed as one op (OpCosts::forward_backward) it has the bubble the DualPipe README states,
// (PP/2-1)(F&B+B-3W) over PP = 2n stages (B there being the whole backward, B+W here), and at most
// PP+1 chunks of microbatches between F and B on a rank (tests/pipeline/simulator_test.cpp).
#include <cassert>
#include <deque>
#include <utility>

#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {
namespace {

// One rank's program with per-chunk microbatch counters and the FIFO of split B's awaiting W.
class DualPipeVRank {
 public:
  DualPipeVRank(int pp, int rank)
      : program_(config::StagePlacement::of(config::ScheduleKind::DualPipeV, pp, 2), rank) {}
  void forward(int chunk, bool opens_pair = false) { program_.forward(next_forward_[chunk]++, chunk, opens_pair); }
  // DualPipe's F&B: the forward of one chunk overlapped with the whole backward of the other.
  void forward_backward(int forward_chunk, int backward_chunk) {
    forward(forward_chunk, true);
    backward(backward_chunk, false);
  }
  void backward(int chunk, bool split) {
    const int mb = next_backward_[chunk]++;
    program_.backward(mb, chunk);
    if (split) {
      weight_grads_.emplace_back(mb, chunk);
    } else {
      program_.weight_grad(mb, chunk);
    }
  }
  void weight_grad() {
    assert(!weight_grads_.empty());
    const auto [mb, chunk] = weight_grads_.front();
    weight_grads_.pop_front();
    program_.weight_grad(mb, chunk);
  }
  std::vector<Instr> take() {
    assert(weight_grads_.empty());
    return program_.take();
  }

 private:
  RankProgram program_;
  int next_forward_[2] = {0, 0}, next_backward_[2] = {0, 0};
  std::deque<std::pair<int, int>> weight_grads_;
};

}  // namespace

RankLists build_dualpipev(int pp, int microbatches) {
  const int n = pp, m = microbatches;
  RankLists ranks;
  for (int r = 0; r < n; ++r) {
    DualPipeVRank rank(pp, r);
    auto repeat = [](int times, auto&& body) {
      for (int i = 0; i < times; ++i) body(i);
    };
    repeat(2 * (n - r - 1), [&](int) { rank.forward(0); });
    repeat(r + 1, [&](int) {
      rank.forward(0);
      rank.forward(1);
    });
    repeat(n - r - 1, [&](int) {
      rank.backward(1, true);
      rank.weight_grad();
      rank.forward(1);
    });
    repeat(m - 2 * n + r + 1, [&](int i) {
      if (i == 0 && r == n - 1) {
        rank.forward(0);
        rank.backward(1, false);
      } else {
        rank.forward_backward(0, 1);
      }
      rank.forward_backward(1, 0);
    });
    repeat(n - r - 1, [&](int) {
      rank.backward(1, false);
      rank.forward_backward(1, 0);
    });
    // Of the 2(r+1) B's, the last r+1 split: from B1 of the middle pair on when r+1 is even, from
    // its B0 when odd.
    const int middle = (r + 1) / 2;
    repeat(r + 1, [&](int i) {
      rank.backward(1, i > middle || (i == middle && (r + 1) % 2 == 0));
      rank.backward(0, i >= middle);
    });
    repeat(n - r - 1, [&](int) {
      rank.weight_grad();
      rank.backward(0, true);
    });
    repeat(r + 1, [&](int) { rank.weight_grad(); });
    ranks.push_back(rank.take());
  }
  return ranks;
}

}  // namespace ptrain::pipeline::detail
