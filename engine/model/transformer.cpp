#include "engine/model/transformer.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>

namespace ptrain::model {
namespace {

using kernels::Buf;
using kernels::DType;

std::string layer_prefix(bool gpt2, int layer) {
  return (gpt2 ? "h." : "model.layers.") + std::to_string(layer) + ".";
}

// Counts what a layout asks for (first pass), so the arena can be sized exactly before the second
// pass hands out the views.
struct Measure {
  std::int64_t bytes = 0;
  Buf operator()(std::int64_t count, DType dtype) {
    bytes = runtime::Arena::aligned_end(bytes, count, dtype);
    return {};
  }
};

}  // namespace

Transformer::Transformer(const config::JobSpec& spec, ParamStore& params, const kernels::Ops& ops,
                         ChunkOptions chunk)
    : params_(params),
      ops_(ops),
      recompute_(spec.train.recompute),
      workspace_from_(chunk.workspace_from),
      split_weight_grad_(chunk.split_weight_grad),
      tp_(chunk.tensor_parallel),
      experts_over_tp_(spec.parallel.experts_over_tp),
      cp_(chunk.context_parallel),
      act_(config::bf16_working(spec.train.precision) ? DType::BF16 : DType::F32),
      precision_(spec.train.precision) {
  const auto& m = spec.model;
  dims_.gpt2 = m.arch == config::Arch::Gpt2;
  dims_.B = spec.train.micro_batch;
  dims_.T = m.seq_len / spec.parallel.cp;
  dims_.N = dims_.B * dims_.T;
  dims_.C = m.hidden;
  dims_.Hq = m.heads / spec.parallel.tp;
  dims_.Hkv = std::max(m.kv_heads / spec.parallel.tp, 1);
  dims_.D = m.head_dim();
  dims_.F = m.ffn_hidden / spec.parallel.tp;
  dims_.V = m.vocab;
  dims_.Vp = m.padded_vocab / spec.parallel.tp;
  dims_.eps = static_cast<float>(m.norm_eps);
  dims_.rope_theta = static_cast<float>(m.rope_theta);

  if (spec.parallel.tp > 1 && (tp_ == nullptr || tp_->size() != spec.parallel.tp))
    throw std::invalid_argument("Transformer: parallel.tp = " + std::to_string(spec.parallel.tp) +
                                " needs a tensor-parallel group of that size");
  if (spec.parallel.tp == 1) tp_ = nullptr;
  sequence_parallel_ = tp_ != nullptr && spec.parallel.sequence_parallel;
  if (tp_ != nullptr && tp_->sequence_parallel() != spec.parallel.sequence_parallel)
    throw std::invalid_argument("Transformer: the tensor-parallel group's sequence parallelism is not the job's");
  if (spec.parallel.cp > 1 && (cp_ == nullptr || cp_->size() != spec.parallel.cp ||
                               cp_->seq_len() != m.seq_len || cp_->micro_batch() != dims_.B ||
                               cp_->mode() != spec.parallel.cp_comm))
    throw std::invalid_argument("Transformer: parallel.cp = " + std::to_string(spec.parallel.cp) +
                                " needs a context-parallel group of that size for micro_batch " +
                                std::to_string(dims_.B) + " and seq_len " + std::to_string(m.seq_len) +
                                " with cp_comm " + config::to_string(spec.parallel.cp_comm));
  if (spec.parallel.cp == 1) cp_ = nullptr;
  if (cp_ == nullptr) {
    query_chunks_ = {{0, dims_.T, 0}};
  } else {
    const int L = cp_->chunk_len();
    query_chunks_ = {{0, L, cp_->chunk_start(0)},
                     {static_cast<std::int64_t>(dims_.B) * L, L, cp_->chunk_start(1)}};
  }
  dims_.Ns = sequence_parallel_ ? dims_.N / spec.parallel.tp : dims_.N;
  if (m.arch == config::Arch::Mixtral) {
    // Routing is per sequence (moe_block.h): the block must see the tp group's tokens (all-gathered
    // under sequence parallelism) and routes the cp group's chunks as whole sequences.
    if (tp_ != nullptr && !sequence_parallel_)
      throw std::invalid_argument("Transformer: MoE layers run with tp > 1 under sequence parallelism");
    moe_.emplace(spec, ops_, dims_.T, chunk.expert_parallel, tp_, cp_);
  }
  const ShardCoords& at = params_.coords();
  if (chunk.index < 0 || chunk.index >= at.vpp)
    throw std::invalid_argument("Transformer: no model chunk " + std::to_string(chunk.index));
  first_ = at.placement().first(at.pp_rank, chunk.index);
  last_ = at.placement().last(at.pp_rank, chunk.index);
  std::map<int, std::pair<int, int>>
      units_of_layer;  // this chunk's layers (global index): units, dense and experts
  for (const ParamSlot& s : params_.slots()) {
    if (s.local.info->layer < 0 || s.local.chunk != chunk.index) continue;
    auto [it, added] = units_of_layer.try_emplace(s.local.info->layer, -1, -1);
    (params_.expert_unit(s.unit) ? it->second.second : it->second.first) = s.unit;
  }
  dims_.layers = static_cast<int>(units_of_layer.size());
  for (const auto& [layer, units] : units_of_layer) {
    layer_ids_.push_back(layer);
    layer_units_.push_back(units.first);
    expert_units_.push_back(units.second);
    layer_tensors_.push_back(resolve_layer(layer));
  }
  ends_ = resolve_ends();
  if (keeps_fp8_weight_copies(spec)) keep_fp8_weight_copies();

  {
    Measure one;
    Slot probe;
    lay_out_slot(spec, std::ref(one), probe);
    slot_bytes_ = one.bytes;
  }
  Measure measure;
  lay_out_workspace(spec, std::ref(measure));
  for (int i = 0; i < chunk.slots; ++i) {
    Slot probe;
    lay_out_slot(spec, std::ref(measure), probe);
  }
  arena_ = runtime::Arena(ops_, measure.bytes);
  const TakeFromArena take = [this](std::int64_t count, DType dtype) { return arena_.take(count, dtype); };
  lay_out_workspace(spec, take);
  slots_.assign(static_cast<size_t>(chunk.slots), Slot{});
  for (Slot& s : slots_) lay_out_slot(spec, take, s);
}

void Transformer::place_slots(const config::JobSpec& spec, Buf pool, std::int64_t stride_bytes, int count) {
  if (!slots_.empty()) throw std::logic_error("Transformer::place_slots: the chunk has slots of its own");
  if (stride_bytes < slot_bytes_ || stride_bytes % runtime::Arena::kAlignment != 0)
    throw std::logic_error("Transformer::place_slots: a stride of " + std::to_string(stride_bytes) +
                           " bytes does not hold an aligned slot of " + std::to_string(slot_bytes_));
  slots_.assign(static_cast<size_t>(count), Slot{});
  for (int i = 0; i < count; ++i) {
    runtime::Arena region = runtime::Arena::over(
        Buf{static_cast<char*>(pool.ptr) + static_cast<std::int64_t>(i) * stride_bytes, pool.dtype}, stride_bytes);
    lay_out_slot(spec, [&region](std::int64_t n, DType dtype) { return region.take(n, dtype); },
                 slots_[static_cast<size_t>(i)]);
  }
}

std::string Transformer::name(const char* gpt2_name, const char* llama_name) const {
  return dims_.gpt2 ? gpt2_name : llama_name;
}

void Transformer::keep_fp8_weight_copies() {
  Fp8WeightCopies& copies = fp8_weight_copies_.emplace(ops_);
  const auto& d = dims_;
  const std::int64_t C = d.C, q_cols = static_cast<std::int64_t>(d.Hq) * d.D,
                     kv_cols = static_cast<std::int64_t>(d.Hkv) * d.D, F = d.F;
  for (const int layer : layer_ids_) {  // [N, K] of each GEMM's weight, as its calls give them
    auto keep = [&](Fp8Linear which, std::int64_t elements) {
      copies.add(layer, fp8_linear_index(which), elements);
    };
    keep(Fp8Linear::Q, q_cols * C);
    keep(Fp8Linear::K, kv_cols * C);
    keep(Fp8Linear::V, kv_cols * C);
    keep(Fp8Linear::O, C * q_cols);
    if (moe_) {  // this rank's experts, not split over tp: [ffn_hidden, hidden] and back
      const std::int64_t expert_f = moe_->expert_ffn();
      for (int e = moe_->first_local_expert(); e < moe_->first_local_expert() + moe_->local_experts(); ++e)
        for (const Fp8Linear which : {Fp8Linear::Gate, Fp8Linear::Up, Fp8Linear::Down})
          copies.add(layer, fp8_expert_linear_index(e, which), expert_f * C);
      continue;
    }
    keep(Fp8Linear::Up, F * C);
    if (!d.gpt2) keep(Fp8Linear::Gate, F * C);
    keep(Fp8Linear::Down, C * F);
  }
}

void Transformer::weights_changed() {
  if (fp8_weight_copies_) fp8_weight_copies_->weights_changed();
}

std::int64_t Transformer::fp8_weight_copy_bytes() const {
  return fp8_weight_copies_ ? fp8_weight_copies_->device_bytes() : 0;
}

BlockLinears Transformer::linears_at(int layer, int index, parallel::TensorParallel* tp, SharedInput* shared) const {
  std::optional<BlockLinears::Delayed> delayed;
  if (fp8_history_ != nullptr)
    delayed = BlockLinears::Delayed{fp8_history_->linear(layer, index), fp8_history_->filled()};
  std::optional<WeightCopyAt> weight_copy;
  if (fp8_weight_copies_) weight_copy = WeightCopyAt{&*fp8_weight_copies_, layer, index};
  return BlockLinears(ops_, precision_, ws_.fp8, tp, cp_, delayed, shared, weight_copy);
}

BlockLinears Transformer::linears(const LayerWeights& w, Fp8Linear which, SharedInput* shared) const {
  return linears_at(w.layer, fp8_linear_index(which), tp_, shared);
}

ExpertLinears Transformer::expert_linears(const LayerWeights& w) const {
  // Experts split over the tp group (parallel.experts_over_tp): an expert block holds the tp group's
  // whole tokens, its tp peers run other experts, so nothing is reduced over tp. Otherwise each tp
  // rank dispatches its own tokens, and the same block of its tp peers holds the rest of the
  // microbatch (their ep groups run alike: engine limits refuse ep groups across tp or cp ranks).
  parallel::TensorParallel* tp = experts_over_tp_ ? nullptr : tp_;
  return [this, tp, layer = w.layer](int expert, Fp8Linear which, SharedInput* shared) {
    return linears_at(layer, fp8_expert_linear_index(expert, which), tp, shared);
  };
}

Transformer::LayerTensors Transformer::resolve_layer(int layer) const {
  LayerTensors t;
  LinearTensors& l = t.linear;
  const std::string p = layer_prefix(dims_.gpt2, layer);
  auto at = [&](const std::string& tensor, std::int64_t offset = 0) { return params_.at(p + tensor, offset); };
  if (dims_.gpt2) {
    const std::int64_t C = dims_.C, q_rows = static_cast<std::int64_t>(dims_.Hq) * dims_.D,
                       kv_rows = static_cast<std::int64_t>(dims_.Hkv) * dims_.D;
    t.norm1_w = at("ln_1.weight"), t.norm1_b = at("ln_1.bias");
    t.norm2_w = at("ln_2.weight"), t.norm2_b = at("ln_2.bias");
    // c_attn holds [q; k; v] rows: three projections share one tensor.
    l.wq = at("attn.c_attn.weight"), l.wk = at("attn.c_attn.weight", q_rows * C);
    l.wv = at("attn.c_attn.weight", (q_rows + kv_rows) * C);
    l.bq = at("attn.c_attn.bias"), l.bk = at("attn.c_attn.bias", q_rows);
    l.bv = at("attn.c_attn.bias", q_rows + kv_rows);
    l.wo = at("attn.c_proj.weight"), l.bo = at("attn.c_proj.bias");
    l.w_up = at("mlp.c_fc.weight"), l.b_up = at("mlp.c_fc.bias");
    l.w_down = at("mlp.c_proj.weight"), l.b_down = at("mlp.c_proj.bias");
    return t;
  }
  t.norm1_w = at("input_layernorm.weight");
  t.norm2_w = at("post_attention_layernorm.weight");
  l.wq = at("self_attn.q_proj.weight"), l.wk = at("self_attn.k_proj.weight");
  l.wv = at("self_attn.v_proj.weight"), l.wo = at("self_attn.o_proj.weight");
  if (!moe_) {
    l.w_gate = at("mlp.gate_proj.weight"), l.w_up = at("mlp.up_proj.weight"), l.w_down = at("mlp.down_proj.weight");
    return t;
  }
  t.router = at("block_sparse_moe.gate.weight");
  for (int e = 0; e < moe_->local_experts(); ++e) {
    const std::string x = "block_sparse_moe.experts." + std::to_string(moe_->first_local_expert() + e) + ".";
    t.experts.push_back({at(x + "w1.weight"), at(x + "w3.weight"), at(x + "w2.weight")});
  }
  return t;
}

Transformer::EndTensors Transformer::resolve_ends() const {
  EndTensors e;
  e.tied = dims_.gpt2 || !params_.contains("lm_head.weight");
  if (first_ || (last_ && e.tied)) e.word_embedding = params_.at(name("wte.weight", "model.embed_tokens.weight"));
  if (first_ && dims_.gpt2) e.positions = params_.at("wpe.weight");
  if (!last_) return e;
  e.head = e.tied ? e.word_embedding : params_.at("lm_head.weight");
  e.final_norm_w = params_.at(name("ln_f.weight", "model.norm.weight"));
  if (dims_.gpt2) e.final_norm_b = params_.at("ln_f.bias");
  return e;
}

Transformer::LayerWeights Transformer::layer_weights(int local_layer, bool with_grads) const {
  // Each linear tensor's two views (llm.c's ParameterTensors keeps its list alike): the
  // static_assert fails when LinearTensors gains a tensor this table does not view.
  using L = LinearTensors;
  using W = LayerWeights;
  static constexpr struct {
    TensorAt L::*at;
    Buf W::*param;
    Buf W::*grad;
  } kViews[] = {
      {&L::wq, &W::wq, &W::g_wq}, {&L::wk, &W::wk, &W::g_wk}, {&L::wv, &W::wv, &W::g_wv},
      {&L::bq, &W::bq, &W::g_bq}, {&L::bk, &W::bk, &W::g_bk}, {&L::bv, &W::bv, &W::g_bv},
      {&L::wo, &W::wo, &W::g_wo}, {&L::bo, &W::bo, &W::g_bo},
      {&L::w_up, &W::w_up, &W::g_up}, {&L::b_up, &W::b_up, &W::g_b_up}, {&L::w_gate, &W::w_gate, &W::g_gate},
      {&L::w_down, &W::w_down, &W::g_down}, {&L::b_down, &W::b_down, &W::g_b_down},
  };
  static_assert(std::size(kViews) * sizeof(TensorAt) == sizeof(LinearTensors),
                "every tensor of LinearTensors needs its views in kViews");
  const LayerTensors& t = layer_tensors_[static_cast<size_t>(local_layer)];
  LayerWeights w;
  w.layer = layer_ids_[static_cast<size_t>(local_layer)];
  w.norm1_w = t.norm1_w, w.norm1_b = t.norm1_b, w.norm2_w = t.norm2_w, w.norm2_b = t.norm2_b;
  // Forward needs no gradients (and under ZeRO 2/3 they have no buffer then).
  auto grad_of = [&](TensorAt at) { return with_grads ? params_.grad(at) : Buf{}; };
  for (const auto& v : kViews) {
    w.*v.param = params_.param(t.linear.*v.at);
    w.*v.grad = grad_of(t.linear.*v.at);
  }
  if (!moe_) return w;
  w.moe.router = params_.param(t.router), w.moe.g_router = grad_of(t.router);
  w.moe.experts.resize(t.experts.size());
  for (std::size_t e = 0; e < t.experts.size(); ++e) {
    const ExpertTensors& at = t.experts[e];
    ExpertWeights& ew = w.moe.experts[e];
    ew.w1 = params_.param(at.w1), ew.w3 = params_.param(at.w3), ew.w2 = params_.param(at.w2);
    ew.g_w1 = grad_of(at.w1), ew.g_w3 = grad_of(at.w3), ew.g_w2 = grad_of(at.w2);
  }
  return w;
}

void Transformer::norm_forward(Buf out, Buf mean, Buf rstd, Buf in, TensorAt w, TensorAt b, Buf amax) {
  if (dims_.gpt2)
    ops_.layernorm_forward(out, mean, rstd, in, params_.param(w), params_.param(b), dims_.Ns, dims_.C,
                           dims_.eps, amax);
  else
    ops_.rmsnorm_forward(out, rstd, in, params_.param(w), dims_.Ns, dims_.C, dims_.eps, amax);
}

void Transformer::norm_backward(Buf d_in, Buf d_out, Buf in, Buf mean, Buf rstd, TensorAt w, TensorAt b) {
  if (dims_.gpt2)
    ops_.layernorm_backward(d_in, params_.grad(w), params_.grad(b), d_out, in, params_.param(w), mean, rstd,
                            dims_.Ns, dims_.C);
  else
    ops_.rmsnorm_backward(d_in, params_.grad(w), d_out, in, params_.param(w), rstd, dims_.Ns, dims_.C);
}

void Transformer::add_norm_forward(Buf x_out, Buf a, Buf b, const NormInto& into) {
  if (dims_.gpt2)
    ops_.add_layernorm_forward(x_out, into.out, into.mean, into.rstd, a, b, params_.param(into.weight),
                               params_.param(into.bias), dims_.Ns, dims_.C, dims_.eps, into.amax);
  else
    ops_.add_rmsnorm_forward(x_out, into.out, into.rstd, a, b, params_.param(into.weight), dims_.Ns, dims_.C,
                             dims_.eps, into.amax);
}

Transformer::NormInto Transformer::norm1_of(int slot_layer, Slot& s) const {
  const LayerActs& a = s.layers[static_cast<size_t>(slot_layer)];
  const LayerTensors& t = layer_tensors_[static_cast<size_t>(slot_layer)];
  return {a.norm1, a.mean1, a.rstd1, t.norm1_w, t.norm1_b, input_amax(a, kNorm1Amax)};
}

void Transformer::layer_forward(const LayerWeights& w, LayerActs& a, Buf x_in, Buf x_out, const NormInto* next,
                                int next_unit) {
  const Buf attention = attention_forward(w, a);
  add_norm_forward(a.x_mid, x_in, attention, {a.norm2, a.mean2, a.rstd2, w.norm2_w, w.norm2_b,
                                              moe_ ? Buf{} : input_amax(a, kNorm2Amax)});  // experts: their own
  const Buf mlp = mlp_forward(w, a);
  if (next == nullptr) return ops_.add(x_out, a.x_mid, mlp, static_cast<std::int64_t>(dims_.Ns) * dims_.C);
  // This layer's weights are no longer read: the next unit may take their place (ZeRO-3 windows).
  announce_forward(next_unit);
  add_norm_forward(x_out, a.x_mid, mlp, *next);
}

bool Transformer::recompute(const LayerWeights& w, LayerActs& a, Buf x_in, Buf x_out_scratch) {
  const auto& d = dims_;
  switch (recompute_) {
    case config::Recompute::None:
      return false;
    case config::Recompute::Selective:  // the norms' amaxes are kept from the forward
      norm_forward(a.norm1, a.mean1, a.rstd1, x_in, w.norm1_w, w.norm1_b);
      norm_forward(a.norm2, a.mean2, a.rstd2, a.x_mid, w.norm2_w, w.norm2_b);
      if (moe_)
        moe_->recompute_activation(a.moe);
      else if (d.gpt2)  // its amax again: on CUDA the forward's GELU ran in the GEMM's epilogue
        ops_.gelu_forward(a.act, a.up, static_cast<std::int64_t>(d.N) * d.F, input_amax(a, kActivationAmax));
      else
        ops_.swiglu_forward(a.act, a.gate, a.up, static_cast<std::int64_t>(d.N) * d.F);
      return false;
    case config::Recompute::Full:
      norm_forward(a.norm1, a.mean1, a.rstd1, x_in, w.norm1_w, w.norm1_b, input_amax(a, kNorm1Amax));
      layer_forward(w, a, x_in, x_out_scratch, nullptr, -1);
      return true;
  }
  return false;
}

void Transformer::layer_backward(const LayerWeights& w, LayerActs& a, Buf x_in, const LayerOutputGrads* keep,
                                 bool kv_gathered) {
  const LayerOutputGrads& g = keep == nullptr ? ws_.outputs : *keep;
  // ws_.d_res holds dLoss/d(layer output); the residual passes it through unchanged, the branches add.
  mlp_backward(w, a, g, keep != nullptr);
  norm_backward(ws_.d_res, reduce_tokens(ws_.d_norm), a.x_mid, a.mean2, a.rstd2, w.norm2_w, w.norm2_b);
  attention_backward(w, a, g, keep != nullptr, kv_gathered);
  norm_backward(ws_.d_res, reduce_tokens(ws_.d_norm), x_in, a.mean1, a.rstd1, w.norm1_w, w.norm1_b);
}

void Transformer::layer_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g) {
  mlp_weight_grad(w, a, g);
  attention_weight_grad(w, a, g);
}

std::int64_t Transformer::run_forward(Slot& s, const std::int32_t* tokens, const std::int32_t* targets,
                                      bool with_grad, float grad_scale, Buf loss_sum) {
  const auto& d = dims_;
  const std::size_t id_bytes = static_cast<std::size_t>(d.N) * sizeof(std::int32_t);
  if (cp_ != nullptr) {  // this rank's chunks of the sequences
    if (first_) tokens = take_chunks(tokens, cp_tokens_);
    if (last_) targets = take_chunks(targets, cp_targets_);
  }
  if (first_) {
    ops_.copy_to_device(s.tokens, tp_ == nullptr ? tokens : shard_token_ids(tokens), id_bytes);
    announce_forward(params_.embedding_unit());
    // Vocab-parallel: each rank adds its rows, tp rank 0 the positions too, and the sum is the embedding.
    // Under sequence parallelism the rows are summed and scattered from the full-token workspace.
    const Buf positions = d.gpt2 ? row_parallel_bias(params_.param(ends_.positions)) : Buf{};
    const Buf embedded = sequence_parallel_ ? ws_.proj_out : s.x[0];
    embed(embedded, s.tokens, positions);
    const Buf summed = reduce_tokens(embedded);
    if (summed.ptr != s.x[0].ptr) ops_.copy(s.x[0], summed, static_cast<std::size_t>(boundary_bytes()));
  }  // else s.x[0] holds what the previous stage sent
  if (last_) ops_.copy_to_device(s.targets, targets, id_bytes);
  // Every residual add is fused with the norm that reads its sum: the first norm alone, then each
  // layer's last add with the next layer's norm1, the last layer's with the final norm (on the last
  // stage; elsewhere the last add is alone, the next stage's first norm reads what it sends).
  const NormInto final_norm{s.normf, s.meanf, s.rstdf, ends_.final_norm_w, ends_.final_norm_b};
  if (d.layers > 0 || last_) {
    const NormInto first = d.layers > 0 ? norm1_of(0, s) : final_norm;
    announce_forward(d.layers > 0 ? layer_unit(0) : params_.final_unit());
    norm_forward(first.out, first.mean, first.rstd, s.x[0], first.weight, first.bias, first.amax);
  }
  for (int l = 0; l < d.layers; ++l) {
    announce_forward(layer_unit(l));
    announce_forward(expert_unit(l));
    const bool last = l + 1 == d.layers;
    const NormInto next = last ? final_norm : norm1_of(l + 1, s);
    layer_forward(layer_weights(l, false), s.layers[static_cast<size_t>(l)],
                  s.x[static_cast<size_t>(l)], s.x[static_cast<size_t>(l) + 1], last && !last_ ? nullptr : &next,
                  last ? params_.final_unit() : layer_unit(l + 1));
  }
  if (!last_) return 0;

  if (ends_.tied) announce_forward(params_.embedding_unit());
  const Buf head = params_.param(ends_.head);
  ops_.linear_forward(s.logits, gather_tokens(s.normf, ws_.gathered), head, Buf{}, d.N, d.Vp, d.C);
  cross_entropy(s, with_grad, grad_scale);

  ops_.sum(loss_sum, s.losses, d.N);  // ignored targets have loss 0
  return std::count_if(targets, targets + d.N, [](std::int32_t t) { return t >= 0; });
}

Buf Transformer::reduce_tokens(Buf full) {
  return tp_ == nullptr ? full : tp_->reduce_tokens(full, static_cast<std::int64_t>(dims_.Ns) * dims_.C);
}

Buf Transformer::gather_tokens(Buf mine, Buf full) {
  return tp_ == nullptr ? mine : tp_->gather_tokens(mine, full, static_cast<std::int64_t>(dims_.Ns) * dims_.C);
}

const std::int32_t* Transformer::take_chunks(const std::int32_t* batch,
                                             std::vector<std::int32_t>& mine) const {
  mine.resize(static_cast<std::size_t>(dims_.N));
  cp_->take_chunks(batch, mine.data());
  return mine.data();
}

std::int64_t Transformer::forward(int slot, const std::int32_t* tokens, const std::int32_t* targets,
                                  float grad_scale, Buf loss_sum) {
  return run_forward(slots_.at(static_cast<size_t>(slot)), tokens, targets, true, grad_scale, loss_sum);
}

std::int64_t Transformer::evaluate(int slot, const std::int32_t* tokens, const std::int32_t* targets,
                                   Buf loss_sum) {
  return run_forward(slots_.at(static_cast<size_t>(slot)), tokens, targets, false, 0.0f, loss_sum);
}

const float* Transformer::logits(int slot) const {
  if (ops_.device() != kernels::Device::Cpu || act_ != DType::F32)
    throw std::logic_error("Transformer::logits: host-readable on the CPU backend in fp32 only");
  return slots_.at(static_cast<size_t>(slot)).logits.as<float>();
}

void Transformer::backward(int slot_index) {
  const auto& d = dims_;
  Slot& s = slots_.at(static_cast<size_t>(slot_index));
  const std::int64_t mine = static_cast<std::int64_t>(d.Ns) * d.C;  // this rank's residual stream
  // With split weight gradients the units stay open until weight_grad().
  auto done = [&](int unit) {
    if (!split_weight_grad_) announce_done(unit);
  };
  if (last_) {
    const bool tied = ends_.tied;
    announce_backward(params_.final_unit());
    if (tied) announce_backward(params_.embedding_unit());
    // s.logits holds dLoss/dlogits (the fused loss wrote it in forward).
    ops_.linear_backward(ws_.d_norm, split_weight_grad_ ? Buf{} : params_.grad(ends_.head), Buf{}, s.logits,
                         gather_tokens(s.normf, ws_.gathered), params_.param(ends_.head), d.N, d.Vp, d.C);
    ops_.fill(ws_.d_res, 0.0f, mine);
    norm_backward(ws_.d_res, reduce_tokens(ws_.d_norm), s.x.back(), s.meanf, s.rstdf, ends_.final_norm_w,
                  ends_.final_norm_b);
    done(params_.final_unit());
    // A copy of the tied embedding on the last of several stages is done with here.
    if (tied && !first_) done(params_.embedding_unit());
  }  // else ws_.d_res holds what the next stage sent (output_grad())
  for (int l = d.layers - 1; l >= 0; --l) {
    announce_backward(layer_unit(l));
    announce_backward(expert_unit(l));
    const LayerWeights w = layer_weights(l, true);
    LayerActs& a = s.layers[static_cast<size_t>(l)];
    const bool attention_rerun = recompute(w, a, s.x[static_cast<size_t>(l)], ws_.proj_out);
    layer_backward(w, a, s.x[static_cast<size_t>(l)],
                   split_weight_grad_ ? &s.output_grads[static_cast<size_t>(l)] : nullptr, attention_rerun);
    done(expert_unit(l));
    done(layer_unit(l));
  }
  if (!first_) return;  // ws_.d_res is the input's gradient (input_grad())
  announce_backward(params_.embedding_unit());
  embed_backward(gather_tokens(ws_.d_res, ws_.d_full), s.tokens, params_.grad(ends_.positions));
  done(params_.embedding_unit());
}

void Transformer::weight_grad(int slot_index) {
  if (!split_weight_grad_)
    throw std::logic_error("Transformer::weight_grad: backward() computed them already");
  const auto& d = dims_;
  Slot& s = slots_.at(static_cast<size_t>(slot_index));
  if (last_) {
    announce_backward(params_.final_unit());
    if (ends_.tied) announce_backward(params_.embedding_unit());
    ops_.linear_backward(Buf{}, params_.grad(ends_.head), Buf{}, s.logits, gather_tokens(s.normf, ws_.gathered),
                         params_.param(ends_.head), d.N, d.Vp, d.C);
    announce_done(params_.final_unit());
    if (ends_.tied && !first_) announce_done(params_.embedding_unit());
  }
  for (int l = d.layers - 1; l >= 0; --l) {
    announce_backward(layer_unit(l));
    announce_backward(expert_unit(l));
    const LayerWeights w = layer_weights(l, true);
    LayerActs& a = s.layers[static_cast<size_t>(l)];
    // What the recompute policy dropped was rebuilt in the workspace for backward, and overwritten since.
    recompute(w, a, s.x[static_cast<size_t>(l)], ws_.proj_out);
    layer_weight_grad(w, a, s.output_grads[static_cast<size_t>(l)]);
    announce_done(expert_unit(l));
    announce_done(layer_unit(l));
  }
  if (!first_) return;
  announce_backward(params_.embedding_unit());  // its gradient was all written in backward()
  announce_done(params_.embedding_unit());
}

std::size_t Transformer::boundary_bytes() const {
  return static_cast<std::size_t>(boundary_elements()) * kernels::dtype_size(act_);
}

Buf Transformer::input(int slot) const { return slots_.at(static_cast<size_t>(slot)).x.front(); }
Buf Transformer::output(int slot) const { return slots_.at(static_cast<size_t>(slot)).x.back(); }

Buf Transformer::output_grad() const {
  if (last_) throw std::logic_error("Transformer::output_grad: the last stage starts its backward from the loss");
  return ws_.d_res;
}

Buf Transformer::input_grad() const {
  if (first_) throw std::logic_error("Transformer::input_grad: the first stage has no input to send a gradient to");
  return ws_.d_res;
}

}  // namespace ptrain::model
