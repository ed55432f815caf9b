// GPipe (Huang et al. 2019): fill the pipeline with every microbatch, then drain it.
//   warmup:   all m forwards, in microbatch order;
//   steady:   none;
//   cooldown: all m backwards, in microbatch order.
// Simple, but each rank holds the activations of all m microbatches at the turn.
#include "engine/pipeline/schedule_builders.h"

namespace ptrain::pipeline::detail {

RankLists build_gpipe(int pp, int microbatches) {
  RankLists ranks;
  for (int rank = 0; rank < pp; ++rank) {
    RankProgram program(config::StagePlacement::of(config::ScheduleKind::Gpipe, pp, 1), rank);
    for (int mb = 0; mb < microbatches; ++mb) program.forward(mb, 0);
    for (int mb = 0; mb < microbatches; ++mb) program.backward(mb, 0);
    ranks.push_back(program.take());
  }
  return ranks;
}

}  // namespace ptrain::pipeline::detail
