// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline): each rank holds vpp
// model chunks; virtual stage v = chunk*pp + rank. Both directions walk "virtual microbatches"
// k = 0 .. m*vpp-1 in groups of pp microbatches per chunk (megatron_forward/_backward):
//   forward  k -> microbatch (k / (pp*vpp))*pp + k % pp, chunk (k / pp) % vpp;
//   backward k -> the same microbatch, chunk vpp-1 - (k / pp) % vpp.
//   warmup:   rank r runs (pp-r-1)*2 + (vpp-1)*pp forwards (capped at m*vpp): enough to keep the
//             chunk-to-chunk wrap from rank pp-1 to rank 0 busy;
//   steady:   forward k+warmup, then backward k;
//   cooldown: the remaining backwards.
// The bubble shrinks by vpp at the cost of vpp times more point-to-point messages.
#include <algorithm>

#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {

RankLists build_interleaved_1f1b(int pp, int vpp, int microbatches) {
  const int total = microbatches * vpp;
  RankLists ranks;
  for (int rank = 0; rank < pp; ++rank) {
    RankProgram program(config::StagePlacement::of(config::ScheduleKind::Interleaved1F1B, pp, vpp), rank);
    auto forward = [&](int k) {
      const Slot s = megatron_forward(k, pp, vpp);
      program.forward(s.microbatch, s.chunk);
    };
    auto backward = [&](int k) {
      const Slot s = megatron_backward(k, pp, vpp);
      program.backward(s.microbatch, s.chunk);
    };

    const int warmup = std::min((pp - rank - 1) * 2 + (vpp - 1) * pp, total);
    const int steady = total - warmup;
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < steady; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = steady; k < total; ++k) backward(k);
    ranks.push_back(program.take());
  }
  return ranks;
}

}  // namespace ptrain::pipeline::detail
