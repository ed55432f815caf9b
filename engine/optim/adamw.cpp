#include "engine/optim/adamw.h"

#include <cmath>

namespace ptrain::optim {

AdamW::AdamW(const config::OptimizerSpec& spec, model::ParamStore& params, const kernels::Ops& ops)
    : spec_(spec),
      params_(params),
      ops_(ops),
      m_(params.numel(), kernels::DType::F32),
      v_(params.numel(), kernels::DType::F32) {}

double AdamW::grad_norm() const {
  return std::sqrt(ops_.sum_squares({params_.grads(), kernels::DType::F32}, params_.numel()));
}

double AdamW::clip(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  ops_.scale({params_.grads(), kernels::DType::F32}, static_cast<float>(factor), params_.numel());
  return factor;
}

void AdamW::step(double lr, std::int64_t step) {
  for (const model::ParamSlot& s : params_.slots()) {
    const float decay = s.local.info->weight_decay ? static_cast<float>(spec_.weight_decay) : 0.0f;
    ops_.adamw_step({params_.params() + s.offset, kernels::DType::F32}, {params_.grads() + s.offset, kernels::DType::F32},
                    {exp_avg() + s.offset, kernels::DType::F32}, {exp_avg_sq() + s.offset, kernels::DType::F32},
                    s.numel, static_cast<float>(lr), static_cast<float>(spec_.betas[0]),
                    static_cast<float>(spec_.betas[1]), static_cast<float>(spec_.eps), decay, static_cast<int>(step));
  }
}

}  // namespace ptrain::optim
