#include "engine/plan/zero3_gathers.h"

namespace ptrain::plan {

Zero3Gathers zero3_gathers(const pipeline::Schedule& schedule, const FlatUnits& units, int pp_rank) {
  const int count = units.count();
  const int pp = schedule.pp, vpp = schedule.vpp;
  // Each model chunk's announcements (Transformer::run_forward, backward, weight_grad), unit by unit.
  std::vector<std::vector<int>> forward(static_cast<std::size_t>(vpp)), backward(forward.size());
  for (int c = 0; c < vpp; ++c) {
    std::vector<int> layers;
    for (int u = 0; u < count; ++u)
      if (units.chunk[static_cast<std::size_t>(u)] == c) layers.push_back(u);
    const bool first = pp_rank == 0 && c == 0, last = pp_rank == pp - 1 && c == vpp - 1;
    std::vector<int>& f = forward[static_cast<std::size_t>(c)];
    if (first) f.push_back(units.embedding);
    if (!layers.empty() || last) f.push_back(!layers.empty() ? layers.front() : units.final);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      f.push_back(layers[l]);
      const bool last_layer = l + 1 == layers.size();
      if (!last_layer) f.push_back(layers[l + 1]);  // the fused add + next norm
      if (last_layer && last) f.push_back(units.final);
    }
    if (last && units.tied) f.push_back(units.embedding);  // the tied head
    std::vector<int>& b = backward[static_cast<std::size_t>(c)];
    if (last) {
      b.push_back(units.final);
      if (units.tied) b.push_back(units.embedding);
    }
    b.insert(b.end(), layers.rbegin(), layers.rend());
    if (first) b.push_back(units.embedding);
  }

  Zero3Gathers out;
  std::vector<int> resident(units.tied ? 3 : 2, -1);
  auto gather = [&](int unit) {
    const int w = units.tied ? (unit == units.embedding ? 0 : 1 + unit % 2) : unit % 2;
    if (resident[static_cast<std::size_t>(w)] == unit) return;
    resident[static_cast<std::size_t>(w)] = unit;
    out.elements += units.size[static_cast<std::size_t>(unit)];
    out.calls += 1;
  };
  for (const pipeline::Instr& in : schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    const auto c = static_cast<std::size_t>(in.chunk);
    if (in.op == pipeline::Op::Forward) {
      for (int unit : forward[c]) {  // ZeroOptimizer::before_forward: prefetches the next unit
        if (unit < 0) continue;
        gather(unit);
        if (unit != units.embedding && unit + 1 < count) gather(unit + 1);
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
