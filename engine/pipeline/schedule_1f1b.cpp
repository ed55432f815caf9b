// 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron's non-interleaved schedule).
//   warmup:   rank r runs pp-r-1 forwards, just enough that the last stage's first backward can
//             start as soon as its forward is done;
//   steady:   one forward, then one backward (of the oldest microbatch in flight);
//   cooldown: the remaining pp-r-1 backwards.
// Rank r never holds more than pp-r microbatches of activations; the bubble is the same as
// GPipe's, (pp-1)/(m+pp-1) of the step with uniform stages.
#include <algorithm>

#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {

RankLists build_1f1b(int pp, int microbatches) {
  RankLists ranks;
  for (int rank = 0; rank < pp; ++rank) {
    RankProgram program(config::StagePlacement::of(config::ScheduleKind::OneFOneB, pp, 1), rank);
    const int warmup = std::min(pp - rank - 1, microbatches);
    const int steady = microbatches - warmup;
    for (int mb = 0; mb < warmup; ++mb) program.forward(mb, 0);
    for (int i = 0; i < steady; ++i) {
      program.forward(warmup + i, 0);
      program.backward(i, 0);
    }
    for (int mb = steady; mb < microbatches; ++mb) program.backward(mb, 0);
    ranks.push_back(program.take());
  }
  return ranks;
}

}  // namespace ptrain::pipeline::detail
