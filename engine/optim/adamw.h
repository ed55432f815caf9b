// AdamW (Loshchilov & Hutter 2019) over a rank's flat fp32 shards: the moments m and v of every
// element the rank updates, and one update of a contiguous run of them. Decoupled weight decay
// where a span asks for it (the model's norms and biases take none). Which elements a rank holds,
// and where its gradients come from, is data parallelism's business (zero/data_parallel.h);
// this file knows nothing of ranks, units or parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/runtime/owned_buffer.h"
#include "kernels/ops.h"

namespace ptrain::optim {

// Elements [begin, end) of a run (offsets from its first element), decayed or not. Elements of the
// run in no span (padding between parameters) are left alone.
struct DecaySpan {
  std::int64_t begin = 0, end = 0;
  bool decay = true;
};

class AdamW {
 public:
  AdamW() = default;
  // Zeroed moments for `elements` fp32 values in `ops`' memory.
  AdamW(const config::OptimizerSpec& spec, const kernels::Ops& ops, std::int64_t elements);

  // One update with learning rate lr of the run of `params` whose moments start at element
  // `moment_offset`, from grad_scale x `grads` (the clip's factor, or 1); `step` counts updates from
  // 1 (bias correction). `copy_out`, unless null, receives the run's updated weights in its dtype
  // (its element i is params[i]'s): the bf16 working copy, written in the same pass.
  void update(float* params, float* grads, std::int64_t moment_offset, const std::vector<DecaySpan>& spans,
              double lr, std::int64_t step, float grad_scale, kernels::Buf copy_out) const;

  float* exp_avg(std::int64_t offset) const { return static_cast<float*>(exp_avg_.data()) + offset; }
  float* exp_avg_sq(std::int64_t offset) const { return static_cast<float*>(exp_avg_sq_.data()) + offset; }
  std::size_t bytes() const { return exp_avg_.bytes() + exp_avg_sq_.bytes(); }

 private:
  const config::OptimizerSpec* spec_ = nullptr;
  const kernels::Ops* ops_ = nullptr;
  runtime::OwnedBuffer exp_avg_, exp_avg_sq_;
};

}  // namespace ptrain::optim
