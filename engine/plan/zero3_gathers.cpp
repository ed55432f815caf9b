#include "engine/plan/zero3_gathers.h"

#include <array>
#include <map>
#include <vector>

namespace ptrain::plan {
namespace {

// The gathers of pp rank `pp_rank`'s list of `schedule`.
Zero3Gathers replay(const pipeline::Schedule& schedule, const model::FlatLayout& layout, int pp_rank) {
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
  // The unit each window holds (-1: stale). An instruction's gathers depend on nothing but these
  // and the instruction's direction and chunk, so each (windows, direction, chunk) is replayed unit
  // by unit once and its outcome looked up after: a step of thousands of microbatches meets a few
  // dozen. States are numbered as met; next[(state * 2 + forward) * vpp + chunk] is the index of
  // the outcome in `outcomes`.
  constexpr int kMostWindows = 1 + 2 + 2;  // a tied embedding's, two dense, two for the experts: expert_first + 2
  using Windows = std::array<int, kMostWindows>;
  struct Outcome {
    int after;  // state
    Zero3Gathers added;
  };
  std::vector<Windows> states;
  std::map<Windows, int> state_number;
  std::vector<int> next;  // index into outcomes; -1: not met yet
  std::vector<Outcome> outcomes;
  auto number = [&](const Windows& w) {
    auto [at, added] = state_number.try_emplace(w, static_cast<int>(states.size()));
    if (added) {
      states.push_back(w);
      next.resize(states.size() * 2 * static_cast<std::size_t>(vpp), -1);
    }
    return at->second;
  };
  auto replay = [&](int state, bool is_forward, int chunk) {
    Windows resident = states[static_cast<std::size_t>(state)];
    Zero3Gathers added;
    auto gather = [&](int unit) {
      int& held = resident[static_cast<std::size_t>(window[static_cast<std::size_t>(unit)])];
      if (held == unit) return;
      held = unit;
      const std::int64_t n = layout.units[static_cast<std::size_t>(unit)].size();
      if (is_expert(unit)) {
        added.expert_elements += n, ++added.expert_calls;
      } else {
        added.elements += n, ++added.calls;
      }
    };
    for (int unit : (is_forward ? forward : backward)[static_cast<std::size_t>(chunk)]) {
      if (unit < 0) continue;
      gather(unit);
      if (is_forward && unit != layout.embedding && unit + 1 < count) gather(unit + 1);  // before_forward: the next
      if (!is_forward && unit > 0) gather(unit - 1);  // before_backward: prefetches the previous unit
    }
    return Outcome{number(resident), added};
  };
  Windows stale;
  stale.fill(-1);
  int state = number(stale);
  Zero3Gathers out;
  for (const pipeline::Instr& in : schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    const bool is_forward = in.op == pipeline::Op::Forward;
    if (!is_forward && in.op != pipeline::Op::Backward && in.op != pipeline::Op::WeightGrad) continue;
    const auto at = (static_cast<std::size_t>(state) * 2 + (is_forward ? 1 : 0)) * static_cast<std::size_t>(vpp) +
                    static_cast<std::size_t>(in.chunk);
    if (next[at] < 0) {
      const Outcome o = replay(state, is_forward, in.chunk);  // may grow `next`
      next[at] = static_cast<int>(outcomes.size());
      outcomes.push_back(o);
    }
    const Outcome& o = outcomes[static_cast<std::size_t>(next[at])];
    state = o.after;
    out.elements += o.added.elements, out.calls += o.added.calls;
    out.expert_elements += o.added.expert_elements, out.expert_calls += o.added.expert_calls;
  }
  return out;
}

}  // namespace

Zero3Gathers zero3_gathers(const pipeline::ScheduleModel& schedule, const model::FlatLayout& layout, int pp_rank) {
  const pipeline::ScheduleModel::Counts counts = schedule.count([&](const pipeline::Schedule& lists) {
    const Zero3Gathers g = replay(lists, layout, pp_rank);
    return pipeline::ScheduleModel::Counts{g.elements, g.calls, g.expert_elements, g.expert_calls};
  });
  return {counts[0], counts[1], counts[2], counts[3]};
}

}  // namespace ptrain::plan
