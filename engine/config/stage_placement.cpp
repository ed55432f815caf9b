#include "engine/config/stage_placement.h"

namespace ptrain::config {

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
