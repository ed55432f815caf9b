// AdamW (Loshchilov & Hutter 2019) over the flat parameter buffer: fp32 moments, decoupled weight
// decay except for norms and biases (ParamInfo::weight_decay), global-norm gradient clipping.
#pragma once

#include <cstdint>

#include "engine/config/job_spec.h"
#include "engine/model/param_store.h"
#include "engine/runtime/host_buffer.h"
#include "kernels/ops.h"

namespace ptrain::optim {

class AdamW {
 public:
  AdamW(const config::OptimizerSpec& spec, model::ParamStore& params, const kernels::Ops& ops);

  // sqrt of the sum of squared gradients over this rank's buffer.
  double grad_norm() const;
  // Scales gradients so their global norm is at most max_norm (0 = no clipping); returns the factor.
  double clip(double norm, double max_norm);
  // One update with learning rate lr; `step` counts updates from 1 (bias correction).
  void step(double lr, std::int64_t step);

  // The moments, laid out like the parameters (checkpoints save them by the same slots).
  float* exp_avg() const { return static_cast<float*>(m_.data()); }
  float* exp_avg_sq() const { return static_cast<float*>(v_.data()); }

 private:
  config::OptimizerSpec spec_;
  model::ParamStore& params_;
  const kernels::Ops& ops_;
  runtime::HostBuffer m_, v_;
};

}  // namespace ptrain::optim
