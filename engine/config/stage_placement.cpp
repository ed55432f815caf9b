#include "engine/config/stage_placement.h"

namespace ptrain::config {

StagePlacement StagePlacement::of(ScheduleKind kind, int pp, int vpp) {
  return {pp, vpp, kind == ScheduleKind::Zbv || kind == ScheduleKind::DualPipeV};
}

// V shape: odd chunks run the ranks backwards (for two chunks, stage 2pp-1-r on rank r).
int StagePlacement::virtual_stage(int rank, int chunk) const {
  return chunk * pp + (v_shape && chunk % 2 == 1 ? pp - 1 - rank : rank);
}

StageHolder StagePlacement::holder(int virtual_stage) const {
  const int chunk = virtual_stage / pp, offset = virtual_stage % pp;
  return {v_shape && chunk % 2 == 1 ? pp - 1 - offset : offset, chunk};
}

int StagePlacement::chunk_beside(int rank, int chunk, int step) const {
  const int stage = virtual_stage(rank, chunk) + step;
  if (stage < 0 || stage >= stages()) return -1;
  const StageHolder beside = holder(stage);
  return beside.rank == rank ? beside.chunk : -1;
}

}  // namespace ptrain::config
