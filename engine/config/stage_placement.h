// Which pp rank and model chunk hold each virtual stage (the model's layers cut into pp*vpp
// consecutive pieces, stage 0 embedding the tokens, the last one computing the loss). One function
// for the schedules, the model's parameter placement, the executor and validate's counts.
//
//   Megatron (gpipe, 1f1b, interleaved-1f1b, zb-h1): v = chunk*pp + rank. Chunk c of rank r feeds
//     chunk c of rank r+1, and rank pp-1's chunk c feeds rank 0's chunk c+1.
//   V shape (zbv, dualpipev; two chunks per rank): rank r holds stages r and 2pp-1-r. The forward
//     runs down the ranks on chunk 0 and back up on chunk 1, so rank 0 holds both the first and the
//     last stage, and rank pp-1's chunk 1 follows its own chunk 0: that hop is local, no message.
#pragma once

#include "engine/config/job_spec.h"

namespace ptrain::config {

struct StageHolder {
  int rank = 0;
  int chunk = 0;
  bool operator==(const StageHolder&) const = default;
};

struct StagePlacement {
  int pp = 1;
  int vpp = 1;  // chunks per rank
  bool v_shape = false;

  // Inline, as virtual_stage: the pipeline simulator asks once per instruction.
  static StagePlacement of(ScheduleKind kind, int pp, int vpp) {
    return {pp, vpp, kind == ScheduleKind::Zbv || kind == ScheduleKind::DualPipeV};
  }
  static StagePlacement of(const JobSpec& spec) {
    return of(spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages);
  }

  int stages() const { return pp * vpp; }
  // V shape: odd chunks run the ranks backwards (for two chunks, stage 2pp-1-r on rank r).
  int virtual_stage(int rank, int chunk) const {
    return chunk * pp + (v_shape && chunk % 2 == 1 ? pp - 1 - rank : rank);
  }
  StageHolder holder(int virtual_stage) const;  // the inverse
  bool first(int rank, int chunk) const { return virtual_stage(rank, chunk) == 0; }
  bool last(int rank, int chunk) const { return virtual_stage(rank, chunk) == stages() - 1; }
  // The pp ranks holding the stage before (after) the one at (rank, chunk); precondition: not the
  // first (last) stage. May be `rank` itself: a local hop, without a message.
  int prev_rank(int rank, int chunk) const { return holder(virtual_stage(rank, chunk) - 1).rank; }
  int next_rank(int rank, int chunk) const { return holder(virtual_stage(rank, chunk) + 1).rank; }
  // The chunk of `rank` that holds the stage `step` (-1 before, +1 after) from (rank, chunk)'s, or
  // -1 when that stage is on another rank or there is none: a hop within the rank.
  int chunk_beside(int rank, int chunk, int step) const;
};

}  // namespace ptrain::config
