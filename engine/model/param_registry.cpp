#include "engine/model/param_registry.h"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace ptrain::model {
namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t product(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

// Appends registry entries; the defaults describe a replicated, weight-decayed layer tensor.
class RegistryBuilder {
 public:
  explicit RegistryBuilder(std::vector<ParamInfo>& out) : out_(out) {}

  ParamInfo& add(std::string name, Shape shape, Placement placement, int layer = -1) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.placement = placement;
    p.layer = layer;
    out_.push_back(std::move(p));
    return out_.back();
  }
  // Column-parallel: output rows split over tp, in whole units of `unit` rows.
  // (A 2-D one is a linear layer's weight: FP8 under train.precision fp8.)
  ParamInfo& column(std::string name, Shape shape, int layer, std::int64_t unit = 1) {
    ParamInfo& p = add(std::move(name), std::move(shape), Placement::Layer, layer);
    p.tp_dim = 0;
    p.tp_unit = unit;
    p.fp8_linear = p.shape.size() == 2;
    return p;
  }
  // Row-parallel: input columns split over tp (a linear layer's weight).
  ParamInfo& row(std::string name, Shape shape, int layer, std::int64_t unit = 1) {
    ParamInfo& p = add(std::move(name), std::move(shape), Placement::Layer, layer);
    p.tp_dim = 1;
    p.tp_unit = unit;
    p.fp8_linear = true;
    return p;
  }
  // Replicated on tp and applied to sequence-sharded activations under SP: no decay, grads reduced over tp.
  ParamInfo& norm_like(std::string name, Shape shape, Placement placement, int layer = -1) {
    ParamInfo& p = add(std::move(name), std::move(shape), placement, layer);
    p.weight_decay = false;
    p.sequence_parallel_grad = true;
    return p;
  }
  // A row-parallel layer's bias: replicated on tp, no decay. Added by one tp rank to the full-token
  // partial sums before they are summed (or scattered) over tp, so its gradient is whole, SP or not.
  ParamInfo& row_parallel_bias(std::string name, Shape shape, int layer) {
    ParamInfo& p = add(std::move(name), std::move(shape), Placement::Layer, layer);
    p.weight_decay = false;
    return p;
  }
  // A vocab-parallel [V, h] table (embedding or head).
  ParamInfo& vocab_parallel(std::string name, const config::ModelSpec& m, Placement placement) {
    ParamInfo& p = add(std::move(name), {m.padded_vocab, m.hidden}, placement);
    p.tp_dim = 0;
    return p;
  }

 private:
  std::vector<ParamInfo>& out_;
};

void add_gpt2(const config::ModelSpec& m, RegistryBuilder& r) {
  const std::int64_t h = m.hidden, f = m.ffn_hidden, d = m.head_dim();
  r.vocab_parallel("wte.weight", m, Placement::Embedding).tied_head = true;
  r.add("wpe.weight", {m.seq_len, h}, Placement::Embedding);
  for (int i = 0; i < m.layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    r.norm_like(p + "ln_1.weight", {h}, Placement::Layer, i);
    r.norm_like(p + "ln_1.bias", {h}, Placement::Layer, i);
    ParamInfo& qkv_w = r.column(p + "attn.c_attn.weight", {3 * h, h}, i, d);
    qkv_w.tp_fused_parts = 3;
    ParamInfo& qkv_b = r.column(p + "attn.c_attn.bias", {3 * h}, i, d);
    qkv_b.tp_fused_parts = 3;
    qkv_b.weight_decay = false;
    r.row(p + "attn.c_proj.weight", {h, h}, i, d);
    r.row_parallel_bias(p + "attn.c_proj.bias", {h}, i);
    r.norm_like(p + "ln_2.weight", {h}, Placement::Layer, i);
    r.norm_like(p + "ln_2.bias", {h}, Placement::Layer, i);
    r.column(p + "mlp.c_fc.weight", {f, h}, i);
    r.column(p + "mlp.c_fc.bias", {f}, i).weight_decay = false;
    r.row(p + "mlp.c_proj.weight", {h, f}, i);
    r.row_parallel_bias(p + "mlp.c_proj.bias", {h}, i);
  }
  r.norm_like("ln_f.weight", {h}, Placement::FinalNorm);
  r.norm_like("ln_f.bias", {h}, Placement::FinalNorm);
}

void add_llama_attention(const config::ModelSpec& m, int i, const std::string& p, RegistryBuilder& r) {
  const std::int64_t h = m.hidden, d = m.head_dim();
  const std::int64_t q_rows = std::int64_t{m.heads} * d, kv_rows = std::int64_t{m.kv_heads} * d;
  r.norm_like(p + "input_layernorm.weight", {h}, Placement::Layer, i);
  r.column(p + "self_attn.q_proj.weight", {q_rows, h}, i, d);
  r.column(p + "self_attn.k_proj.weight", {kv_rows, h}, i, d);
  r.column(p + "self_attn.v_proj.weight", {kv_rows, h}, i, d);
  r.row(p + "self_attn.o_proj.weight", {h, q_rows}, i, d);
  r.norm_like(p + "post_attention_layernorm.weight", {h}, Placement::Layer, i);
}

void add_llama_mlp(const config::ModelSpec& m, int i, const std::string& p, RegistryBuilder& r) {
  const std::int64_t h = m.hidden, f = m.ffn_hidden;
  r.column(p + "mlp.gate_proj.weight", {f, h}, i);
  r.column(p + "mlp.up_proj.weight", {f, h}, i);
  r.row(p + "mlp.down_proj.weight", {h, f}, i);
}

void add_mixtral_moe(const config::ModelSpec& m, int i, const std::string& p, RegistryBuilder& r) {
  const std::int64_t h = m.hidden, f = m.ffn_hidden;
  ParamInfo& router = r.add(p + "block_sparse_moe.gate.weight", {m.moe->experts, h}, Placement::Layer, i);
  router.sequence_parallel_grad = true;  // replicated and fed sequence-sharded tokens under SP
  for (int e = 0; e < m.moe->experts; ++e) {
    const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
    for (const auto& [name, shape] : {std::pair{"w1.weight", Shape{f, h}}, std::pair{"w3.weight", Shape{f, h}},
                                      std::pair{"w2.weight", Shape{h, f}}}) {
      ParamInfo& w = r.add(x + name, shape, Placement::Layer, i);
      w.expert = e;
      w.fp8_linear = true;
    }
  }
}

void add_llama_like(const config::ModelSpec& m, RegistryBuilder& r) {
  const bool moe = m.arch == config::Arch::Mixtral;
  r.vocab_parallel("model.embed_tokens.weight", m, Placement::Embedding).tied_head = m.tie_embeddings;
  for (int i = 0; i < m.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add_llama_attention(m, i, p, r);
    if (moe) {
      add_mixtral_moe(m, i, p, r);
    } else {
      add_llama_mlp(m, i, p, r);
    }
  }
  r.norm_like("model.norm.weight", {m.hidden}, Placement::FinalNorm);
  if (!m.tie_embeddings) r.vocab_parallel("lm_head.weight", m, Placement::Head);
}

// Virtual stage of every layer: stage v holds the next stage_layers[v] layers.
std::vector<int> stage_of_layers(const std::vector<int>& stage_layers) {
  std::vector<int> stage;
  for (size_t v = 0; v < stage_layers.size(); ++v)
    stage.insert(stage.end(), stage_layers[v], static_cast<int>(v));
  return stage;
}

int expert_count(const std::vector<ParamInfo>& registry) {
  int experts = 0;
  for (const ParamInfo& p : registry) experts = std::max(experts, p.expert + 1);
  return experts;
}

}  // namespace

bool ParamInfo::is_matmul() const {
  return shape.size() == 2 && (placement == Placement::Layer || placement == Placement::Head || tied_head);
}

std::int64_t ParamInfo::numel() const {
  return product(shape);
}
std::int64_t LocalParam::numel() const {
  return product(local_shape);
}

std::vector<ParamInfo> build_registry(const config::ModelSpec& model) {
  assert(model.padded_vocab >= model.vocab && model.kv_heads > 0 && model.ffn_hidden > 0);
  assert(model.arch != config::Arch::Mixtral || model.moe.has_value());
  std::vector<ParamInfo> registry;
  registry.reserve(static_cast<size_t>(model.layers) * (model.moe ? 7 + 3 * model.moe->experts : 16) + 8);
  RegistryBuilder builder(registry);
  if (model.arch == config::Arch::Gpt2) {
    add_gpt2(model, builder);
  } else {
    add_llama_like(model, builder);
  }
  return registry;
}

std::vector<std::int64_t> local_shape(const ParamInfo& info, int tp) {
  Shape shape = info.shape;
  if (info.tp_dim < 0 || tp == 1) return shape;
  const std::int64_t units_per_part = shape[info.tp_dim] / info.tp_fused_parts / info.tp_unit;
  assert(units_per_part % tp == 0 || tp % units_per_part == 0);
  const std::int64_t local_units = std::max<std::int64_t>(units_per_part / tp, 1);
  shape[info.tp_dim] = info.tp_fused_parts * local_units * info.tp_unit;
  return shape;
}

std::vector<RowRange> tp_row_ranges(const ParamInfo& info, int tp_rank, int tp) {
  if (info.tp_dim < 0) return {{0, info.shape[0]}};
  const std::int64_t part_rows = info.shape[info.tp_dim] / info.tp_fused_parts;
  const std::int64_t units = part_rows / info.tp_unit;
  std::vector<RowRange> ranges;
  for (int part = 0; part < info.tp_fused_parts; ++part) {
    const std::int64_t part_begin = part * part_rows;
    if (units >= tp) {
      const std::int64_t rows = units / tp * info.tp_unit;
      ranges.push_back({part_begin + tp_rank * rows, rows});
    } else {  // fewer heads than tp ranks: each rank holds one whole head, shared by tp/units ranks
      const std::int64_t unit = tp_rank / (tp / units);
      ranges.push_back({part_begin + unit * info.tp_unit, info.tp_unit});
    }
  }
  return ranges;
}

std::vector<TpBlockRun> tp_block_runs(const ParamInfo& info, int tp_rank, int tp, std::int64_t lo, std::int64_t hi) {
  std::vector<TpBlockRun> runs;
  std::int64_t position = 0;  // local element where the block starts
  for_each_tp_block(info, tp_rank, tp, [&](std::int64_t start, std::int64_t length) {
    const std::int64_t first = std::max(position, lo), last = std::min(position + length, hi);
    position += length;
    if (first >= last) return;
    const std::int64_t global = start + (first - (position - length)), cols = last - first;
    if (!runs.empty()) {  // blocks come back to back locally: extend the run if the shape and step agree
      TpBlockRun& run = runs.back();
      const std::int64_t step = run.rows == 1 ? global - run.global : run.stride;
      if (run.cols == cols && global == run.global + run.rows * step) {
        run.stride = step;
        ++run.rows;
        return;
      }
    }
    runs.push_back({first, 1, cols, global, 0});
  });
  return runs;
}

bool first_tp_copy(const ParamInfo& info, int tp_rank, int tp) {
  if (info.tp_dim < 0) return tp_rank == 0;
  const std::int64_t units = info.shape[info.tp_dim] / info.tp_fused_parts / info.tp_unit;
  return units >= tp || tp_rank % (tp / units) == 0;
}

ShardCoords shard_coords(const config::JobSpec& spec, int pp_rank, int tp_rank, int ep_rank) {
  ShardCoords c;
  c.tp_rank = tp_rank;
  c.tp = spec.parallel.tp;
  c.ep_rank = ep_rank;
  c.ep = spec.parallel.ep;
  c.pp_rank = pp_rank;
  c.pp = spec.parallel.pp;
  c.vpp = spec.schedule.virtual_stages;
  c.v_shape = config::StagePlacement::of(spec).v_shape;
  c.layers_per_stage = spec.schedule.resolved_layers_per_stage;
  return c;
}

bool sends_stage_output(const ShardCoords& c) {
  const config::StagePlacement place = c.placement();
  for (int chunk = 0; chunk < c.vpp; ++chunk)
    if (!place.last(c.pp_rank, chunk) && place.next_rank(c.pp_rank, chunk) != c.pp_rank) return true;
  return false;
}

std::vector<LocalParam> local_params(const std::vector<ParamInfo>& registry, const ShardCoords& coords) {
  const int stages = coords.pp * coords.vpp;
  assert(coords.layers_per_stage.empty() ? stages == 1
                                         : static_cast<int>(coords.layers_per_stage.size()) == stages);
  const std::vector<int> layer_stage = stage_of_layers(coords.layers_per_stage);
  const int experts = expert_count(registry);
  const int experts_per_rank = experts / coords.ep;
  const int last_stage = stages - 1;

  std::vector<LocalParam> local;
  const config::StagePlacement place = coords.placement();
  auto take = [&](const ParamInfo& p, int stage) {
    const config::StageHolder holder = place.holder(stage);
    if (holder.rank == coords.pp_rank) local.push_back({&p, local_shape(p, coords.tp), holder.chunk});
  };
  for (const ParamInfo& p : registry) {
    if (p.expert >= 0 && p.expert / experts_per_rank != coords.ep_rank) continue;
    switch (p.placement) {
      case Placement::Embedding:
        take(p, 0);
        if (p.tied_head && coords.pp > 1) take(p, last_stage);
        break;
      case Placement::Layer:
        take(p, layer_stage.empty() ? 0 : layer_stage.at(static_cast<size_t>(p.layer)));
        break;
      case Placement::FinalNorm:
      case Placement::Head:
        take(p, last_stage);
        break;
    }
  }
  return local;
}

}  // namespace ptrain::model
