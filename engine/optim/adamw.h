// AdamW (Loshchilov & Hutter 2019) over a range of the flat parameter layout: fp32 moments,
// decoupled weight decay except for norms and biases (ParamInfo::weight_decay). Who holds which
// range, and the global gradient norm, are ZeRO's business (zero.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/param_store.h"
#include "kernels/ops.h"

namespace ptrain::optim {

// The flat elements `range` of one rank: params[0], grads[0], exp_avg[0], exp_avg_sq[0] belong to
// element range.begin. Padding between parameters is left alone.
struct AdamWRange {
  model::FlatRange range;
  float* params = nullptr;
  float* grads = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

// One update with learning rate lr; `step` counts updates from 1 (bias correction).
void adamw_update(const config::OptimizerSpec& spec, const std::vector<model::ParamSlot>& slots,
                  const kernels::Ops& ops, const AdamWRange& r, double lr, std::int64_t step);

}  // namespace ptrain::optim
