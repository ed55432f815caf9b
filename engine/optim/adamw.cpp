#include "engine/optim/adamw.h"

namespace ptrain::optim {

AdamW::AdamW(const config::OptimizerSpec& spec, const kernels::Ops& ops, std::int64_t elements)
    : spec_(&spec),
      ops_(&ops),
      exp_avg_(ops, elements, kernels::DType::F32),
      exp_avg_sq_(ops, elements, kernels::DType::F32) {
  switch (spec.kind) {  // the one optimizer.kind there is; another must be built, not run as AdamW
    case config::OptimizerKind::AdamW:
      break;
  }
}

void AdamW::update(float* params, float* grads, std::int64_t moment_offset, const std::vector<DecaySpan>& spans,
                   double lr, std::int64_t step, float grad_scale, kernels::Buf copy_out) const {
  using kernels::Buf;
  using kernels::DType;
  for (const DecaySpan& s : spans) {
    const kernels::AdamWStep scalars{static_cast<float>(lr),
                                     static_cast<float>(spec_->betas[0]),
                                     static_cast<float>(spec_->betas[1]),
                                     static_cast<float>(spec_->eps),
                                     s.decay ? static_cast<float>(spec_->weight_decay) : 0.0f,
                                     static_cast<int>(step),
                                     grad_scale};
    ops_->adamw_step(Buf{params + s.begin, DType::F32}, Buf{grads + s.begin, DType::F32},
                     Buf{exp_avg(moment_offset + s.begin), DType::F32},
                     Buf{exp_avg_sq(moment_offset + s.begin), DType::F32}, runtime::advance(copy_out, s.begin),
                     s.end - s.begin, scalars);
  }
}

}  // namespace ptrain::optim
