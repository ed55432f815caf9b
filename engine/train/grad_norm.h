// The global L2 norm of a step's gradients, and clipping by it (train.grad_clip), over what data
// parallelism owns (parallel::DataParallel::owned_grads). Every element of the model is counted
// once in the whole job: each rank sums the squares of its owned chunk of every unit, except that on
// tp ranks > 0 only the first copies of tensors (model::first_tp_copy: the slices of split ones, not
// the replicated ones tp rank 0 counts) and the experts' units (split over the ep ranks) count, and
// with a tied head over pp stages the last stage's copy of the word embedding does not. The sums
// are then added over the dp-cp group, the tp group (tp > 1) and the pp group (pp > 1).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/model/param_store.h"
#include "engine/runtime/device_scalars.h"
#include "engine/zero/data_parallel.h"
#include "kernels/ops.h"

namespace ptrain::train {

// The groups the norm is summed over, and whether this rank holds the tied embedding's second copy.
struct GradNormGroups {
  const dist::Group* data = nullptr;     // dp-cp (required)
  const dist::Group* tensor = nullptr;   // tp > 1
  const dist::Group* stages = nullptr;   // pp > 1
  bool embedding_copy = false;           // the last stage's copy of a tied word embedding
};

class GradNorm {
 public:
  GradNorm(const model::ParamStore& store, parallel::DataParallel& data_parallel, const kernels::Ops& ops,
           dist::Comm& comm, GradNormGroups groups);

  // The norm of the step's reduced gradients (a collective). Completes the reductions first and
  // waits for the device: the step's one read back (the trainer reads its losses right after, at no
  // further wait).
  double compute();
  // The factor that brings the gradients' global norm to at most max_norm (0 = no clipping): 1, or
  // max_norm / (norm + 1e-6). AdamW applies it as it reads the gradients (DataParallel::step).
  static float clip_factor(double norm, double max_norm);

 private:
  // A range of a unit's owned chunk (offset from its start, length) this rank counts.
  struct Piece {
    int unit = 0;
    std::int64_t offset = 0, length = 0;
  };
  std::vector<Piece> pieces(const model::ParamStore& store) const;

  parallel::DataParallel& data_parallel_;
  const kernels::Ops& ops_;
  dist::Comm& comm_;
  GradNormGroups groups_;
  std::vector<Piece> pieces_;
  runtime::DeviceScalars piece_sums_;  // each piece's sum of squares
};

}  // namespace ptrain::train
