#include "engine/optim/adamw.h"

#include <algorithm>

namespace ptrain::optim {

void adamw_update(const config::OptimizerSpec& spec, const std::vector<model::ParamSlot>& slots,
                  const kernels::Ops& ops, const AdamWRange& r, double lr, std::int64_t step) {
  using kernels::Buf;
  using kernels::DType;
  for (const model::ParamSlot& s : slots) {
    const std::int64_t lo = std::max(r.range.begin, s.offset), hi = std::min(r.range.end, s.offset + s.numel);
    if (lo >= hi) continue;
    const std::int64_t at = lo - r.range.begin;
    const float decay = s.local.info->weight_decay ? static_cast<float>(spec.weight_decay) : 0.0f;
    ops.adamw_step(Buf{r.params + at, DType::F32}, Buf{r.grads + at, DType::F32}, Buf{r.exp_avg + at, DType::F32},
                   Buf{r.exp_avg_sq + at, DType::F32}, hi - lo, static_cast<float>(lr),
                   static_cast<float>(spec.betas[0]), static_cast<float>(spec.betas[1]),
                   static_cast<float>(spec.eps), decay, static_cast<int>(step));
  }
}

}  // namespace ptrain::optim
