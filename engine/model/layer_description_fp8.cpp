// What train.precision fp8 keeps beside the layer description's tensors (model/layer_description.h):
// the linear layers whose casts have amax histories, the histories' device bytes, and whether the
// weights' FP8 codes are kept for the step.
#include "engine/model/layer_description.h"

namespace ptrain::model {

int fp8_linears_per_layer(const config::ModelSpec& model) {
  constexpr int kDense = 7, kAttention = 4, kPerExpert = 3;
  return model.moe ? kAttention + kPerExpert * model.moe->experts : kDense;
}

std::int64_t fp8_history_device_bytes(const config::JobSpec& spec) {
  if (spec.train.precision != config::Precision::Fp8 || spec.train.fp8.scaling != config::Fp8Scaling::Delayed)
    return 0;
  constexpr std::int64_t kOperands = 3, kBuffers = 2;
  return kBuffers * kOperands * fp8_linears_per_layer(spec.model) * spec.model.layers *
         static_cast<std::int64_t>(sizeof(float));
}

bool keeps_fp8_weight_copies(const config::JobSpec& spec) {
  return spec.train.precision == config::Precision::Fp8 && spec.parallel.zero < 3;
}

}  // namespace ptrain::model
