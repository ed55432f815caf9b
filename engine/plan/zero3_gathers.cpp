#include "engine/plan/zero3_gathers.h"

#include <algorithm>

#include "engine/pipeline/schedule.h"

namespace ptrain::plan {
namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// The units of a rank's flat buffer as model::ParamStore cuts them.
struct Units {
  std::vector<std::int64_t> size;  // padded elements
  std::vector<int> chunk;          // model chunk of a layer unit (-1 for the others)
  int embedding = -1, final = -1;  // ParamStore::embedding_unit(), final_unit()
  bool tied = false;               // the head reuses the embedding (ZeroOptimizer's tied window)
};

Units cut_units(const std::vector<model::LocalParam>& local, std::int64_t unit_multiple) {
  Units u;
  int key = 0;
  for (const model::LocalParam& p : local) {
    if (p.info->expert >= 0) continue;  // experts: not in the dense replay
    const int k = model::unit_key(*p.info);
    if (u.size.empty() || k != key) {
      u.size.push_back(0);
      u.chunk.push_back(p.info->placement == model::Placement::Layer ? p.chunk : -1);
      key = k;
      const int index = static_cast<int>(u.size.size()) - 1;
      if (p.info->placement == model::Placement::Embedding)
        u.embedding = index;
      else if (p.info->placement != model::Placement::Layer)
        u.final = index;
    }
    u.size.back() += round_up(p.numel(), model::kFlatAlignment);
    u.tied = u.tied || p.info->tied_head;
  }
  for (std::int64_t& s : u.size) s = round_up(s, unit_multiple);
  return u;
}

}  // namespace

Zero3Gathers zero3_gathers(const config::JobSpec& spec, const std::vector<model::LocalParam>& local,
                           int pp_rank, std::int64_t unit_multiple) {
  const Units units = cut_units(local, unit_multiple);
  const int count = static_cast<int>(units.size.size());
  const int pp = spec.parallel.pp, vpp = spec.schedule.virtual_stages;
  Zero3Gathers out;
  std::vector<int> resident(units.tied ? 3 : 2, -1);
  auto gather = [&](int unit) {
    const int w = units.tied ? (unit == units.embedding ? 0 : 1 + unit % 2) : unit % 2;
    if (resident[static_cast<std::size_t>(w)] == unit) return;
    resident[static_cast<std::size_t>(w)] = unit;
    out.elements += units.size[static_cast<std::size_t>(unit)];
    out.calls += 1;
  };
  auto before_forward = [&](int unit) {
    if (unit < 0) return;
    gather(unit);
    if (unit != units.embedding && unit + 1 < count) gather(unit + 1);
  };
  auto before_backward = [&](int unit) {
    if (unit < 0) return;
    gather(unit);
    if (unit > 0) gather(unit - 1);
  };
  // The announcements of model chunk c (Transformer::run_forward, backward, weight_grad).
  auto layers_of = [&](int c) {
    std::vector<int> layers;
    for (int u = 0; u < count; ++u)
      if (units.chunk[static_cast<std::size_t>(u)] == c) layers.push_back(u);
    return layers;
  };
  auto forward = [&](int c) {
    const std::vector<int> layers = layers_of(c);
    const bool first = pp_rank == 0 && c == 0, last = pp_rank == pp - 1 && c == vpp - 1;
    if (first) before_forward(units.embedding);
    if (!layers.empty() || last) before_forward(!layers.empty() ? layers.front() : units.final);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      before_forward(layers[l]);
      const bool last_layer = l + 1 == layers.size();
      if (!last_layer) before_forward(layers[l + 1]);  // the fused add + next norm
      if (last_layer && last) before_forward(units.final);
    }
    if (last && units.tied) before_forward(units.embedding);  // the tied head
  };
  auto backward = [&](int c) {
    const std::vector<int> layers = layers_of(c);
    const bool first = pp_rank == 0 && c == 0, last = pp_rank == pp - 1 && c == vpp - 1;
    if (last) {
      before_backward(units.final);
      if (units.tied) before_backward(units.embedding);
    }
    for (auto l = layers.rbegin(); l != layers.rend(); ++l) before_backward(*l);
    if (first) before_backward(units.embedding);
  };
  const pipeline::Schedule schedule = pipeline::build(spec.schedule.kind, pp, vpp, spec.train.microbatches);
  for (const pipeline::Instr& in : schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    if (in.op == pipeline::Op::Forward) forward(in.chunk);
    if (in.op == pipeline::Op::Backward || in.op == pipeline::Op::WeightGrad) backward(in.chunk);
  }
  return out;
}

}  // namespace ptrain::plan
