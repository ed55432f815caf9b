// train.precision fp8: each FP8 linear layer's weight cast once per pass -- at its first use after
// the weights may have changed (a training step, an evaluation) -- into E4M3 codes as stored and
// transposed, which every later GEMM of the pass reads: the forward of every microbatch, the
// recomputed forward, the input gradients (docs/fp8.md). Where a weight is used more than once a
// pass this saves its casts (and under current scaling its amax passes) for 2 bytes a weight element.
// Exact: a weight does not change within a pass, so its amax, scale and codes are those every cast
// of the pass would compute, and under delayed scaling the one cast records what they all would.
// Not under ZeRO-3, whose gathered weights live only for their layer: there weights are cast on the
// fly (model::keeps_fp8_weight_copies). A model chunk (model::Transformer) keeps its layers' copies,
// allocated with it, before any step (validate counts them: plan/memory.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "engine/runtime/owned_buffer.h"
#include "kernels/ops.h"

namespace ptrain::model {

struct Fp8WeightCopy {
  runtime::OwnedBuffer codes, codes_t, inv_scale;  // E4M3 [N, K], E4M3 [K, N], F32 [1]
  bool fresh = false;  // whether they hold the weight as it is now
};

class Fp8WeightCopies {
 public:
  explicit Fp8WeightCopies(const kernels::Ops& ops) : ops_(ops) {}

  // Allocates layer `layer`'s linear `index`'s copy (model/fp8_history.h), of a weight of `elements`.
  void add(int layer, int index, std::int64_t elements);
  // That copy; std::logic_error where none of that size was added.
  Fp8WeightCopy& at(int layer, int index, std::int64_t elements);
  // The weights may have changed since the copies were cast: each is cast again at its next use.
  void weights_changed();
  std::int64_t device_bytes() const;

 private:
  const kernels::Ops& ops_;
  std::map<std::pair<int, int>, Fp8WeightCopy> copies_;
};

}  // namespace ptrain::model
