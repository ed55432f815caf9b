#include "engine/plan/flops.h"

#include <numeric>

namespace ptrain::plan {

double MatmulParams::total() const {
  return std::accumulate(layer.begin(), layer.end(), head);
}

MatmulParams matmul_params(const std::vector<model::ParamInfo>& registry, const config::ModelSpec& model) {
  // Expert weights count top_k/E: a token passes through top_k of the E experts.
  const double expert_share = model.moe ? static_cast<double>(model.moe->top_k) / model.moe->experts : 1.0;
  MatmulParams m;
  m.layer.assign(static_cast<size_t>(model.layers), 0.0);
  for (const model::ParamInfo& p : registry) {
    if (!p.is_matmul()) continue;
    const double n = static_cast<double>(p.numel());
    if (p.layer >= 0) {
      m.layer[static_cast<size_t>(p.layer)] += p.expert >= 0 ? n * expert_share : n;
    } else {
      m.head += n;
    }
  }
  return m;
}

double attention_flops_per_token(const config::ModelSpec& model) {
  return 2.0 * model.seq_len * model.heads * model.head_dim();
}

StepFlops step_flops(const config::JobSpec& spec, const MatmulParams& matmul) {
  const double tokens = static_cast<double>(spec.train.global_batch) * spec.model.seq_len;
  const double attention = spec.model.layers * attention_flops_per_token(spec.model);
  const double layer_weights = matmul.total() - matmul.head;
  StepFlops f;
  f.model = tokens * (6.0 * matmul.total() + 3.0 * attention);
  const bool full = spec.train.recompute == config::Recompute::Full;
  f.hardware = f.model + (full ? tokens * (2.0 * layer_weights + attention) : 0.0);
  return f;
}

StageFlops stage_flops(const config::JobSpec& spec, const MatmulParams& matmul) {
  const std::vector<int>& stage_layers = spec.schedule.resolved_layers_per_stage;
  const double tokens_per_rank = static_cast<double>(spec.train.micro_batch) * spec.model.seq_len /
                                 (spec.parallel.tp * spec.parallel.cp);
  const double attention = attention_flops_per_token(spec.model);
  const bool full = spec.train.recompute == config::Recompute::Full;
  StageFlops f;
  size_t layer = 0;
  for (size_t v = 0; v < stage_layers.size(); ++v) {
    double layers_forward = 0;
    for (int i = 0; i < stage_layers[v]; ++i, ++layer)
      layers_forward += 2.0 * matmul.layer[layer] + attention;
    const double head = v + 1 == stage_layers.size() ? 2.0 * matmul.head : 0.0;
    f.forward.push_back(tokens_per_rank * (layers_forward + head));
    f.recompute.push_back(full ? tokens_per_rank * layers_forward : 0.0);
  }
  return f;
}

}  // namespace ptrain::plan
