#include "engine/plan/zero3_gathers.h"

namespace ptrain::plan {

Zero3Gathers zero3_gathers(const pipeline::Schedule& schedule, const model::FlatLayout& layout, int pp_rank) {
  const int count = layout.count();
  const int vpp = schedule.vpp;
  auto is_expert = [&](int u) { return u >= 0 && u < count && layout.expert[static_cast<std::size_t>(u)]; };
  // Each model chunk's announcements (Transformer::run_forward, backward, weight_grad), unit by unit:
  // a layer's unit, then its experts' when they are apart (the unit right after it).
  std::vector<std::vector<int>> forward(static_cast<std::size_t>(vpp)), backward(forward.size());
  for (int c = 0; c < vpp; ++c) {
    std::vector<int> layers;
    for (int u = 0; u < count; ++u)
      if (layout.chunk[static_cast<std::size_t>(u)] == c && !is_expert(u)) layers.push_back(u);
    auto experts_of = [&](int layer_unit) { return is_expert(layer_unit + 1) ? layer_unit + 1 : -1; };
    const bool first = schedule.placement().first(pp_rank, c), last = schedule.placement().last(pp_rank, c);
    std::vector<int>& f = forward[static_cast<std::size_t>(c)];
    if (first) f.push_back(layout.embedding);
    if (!layers.empty() || last) f.push_back(!layers.empty() ? layers.front() : layout.final);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      f.push_back(layers[l]);
      f.push_back(experts_of(layers[l]));
      const bool last_layer = l + 1 == layers.size();
      if (!last_layer) f.push_back(layers[l + 1]);  // the fused add + next norm
      if (last_layer && last) f.push_back(layout.final);
    }
    if (last && layout.tied) f.push_back(layout.embedding);  // the tied head
    std::vector<int>& b = backward[static_cast<std::size_t>(c)];
    if (last) {
      b.push_back(layout.final);
      if (layout.tied) b.push_back(layout.embedding);
    }
    for (auto l = layers.rbegin(); l != layers.rend(); ++l) {
      b.push_back(*l);
      b.push_back(experts_of(*l));
    }
    if (first) b.push_back(layout.embedding);
  }

  // DataParallel's windows: a tied embedding's own (0), two that the dense units alternate between,
  // two for the experts' units.
  const int dense_first = layout.tied ? 1 : 0, expert_first = dense_first + 2;
  std::vector<int> window(static_cast<std::size_t>(count));
  for (int u = 0, dense = 0, experts = 0; u < count; ++u) {
    const int ordinal = is_expert(u) ? experts++ : dense++;
    window[static_cast<std::size_t>(u)] =
        layout.tied && u == layout.embedding ? 0 : (is_expert(u) ? expert_first : dense_first) + ordinal % 2;
  }
  Zero3Gathers out;
  std::vector<int> resident(static_cast<std::size_t>(expert_first + 2), -1);
  auto gather = [&](int unit) {
    int& held = resident[static_cast<std::size_t>(window[static_cast<std::size_t>(unit)])];
    if (held == unit) return;
    held = unit;
    (is_expert(unit) ? out.expert_elements : out.elements) += layout.units[static_cast<std::size_t>(unit)].size();
    (is_expert(unit) ? out.expert_calls : out.calls) += 1;
  };
  for (const pipeline::Instr& in : schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    const auto c = static_cast<std::size_t>(in.chunk);
    if (in.op == pipeline::Op::Forward) {
      for (int unit : forward[c]) {  // DataParallel::before_forward: prefetches the next unit
        if (unit < 0) continue;
        gather(unit);
        if (unit != layout.embedding && unit + 1 < count) gather(unit + 1);
      }
    } else if (in.op == pipeline::Op::Backward || in.op == pipeline::Op::WeightGrad) {
      for (int unit : backward[c]) {  // before_backward: prefetches the previous unit
        if (unit < 0) continue;
        gather(unit);
        if (unit > 0) gather(unit - 1);
      }
    }
  }
  return out;
}

}  // namespace ptrain::plan
