#include "engine/model/saved_activations.h"

#include <algorithm>
#include <cmath>

#include "kernels/op_constants.h"

namespace ptrain::model {
namespace {

constexpr int kFp32 = 4;
constexpr int kInt32 = 4;

// The sizes every list is made of, for one microbatch on one rank.
struct Dims {
  std::int64_t s, b, h, d, f, t;
  std::int64_t local_heads, local_kv_heads;
  std::int64_t seq_shard;  // t under sequence parallelism, else 1
  int act_bytes;

  explicit Dims(const config::JobSpec& spec) {
    const config::ModelSpec& m = spec.model;
    s = m.seq_len / spec.parallel.cp;
    b = spec.train.micro_batch;
    h = m.hidden;
    d = m.head_dim();
    f = m.ffn_hidden;
    t = spec.parallel.tp;
    local_heads = m.heads / t;
    local_kv_heads = std::max<std::int64_t>(m.kv_heads / t, 1);
    seq_shard = spec.parallel.sequence_parallel ? t : 1;
    act_bytes = spec.train.precision == config::Precision::Bf16 ? 2 : 4;
  }
  std::int64_t tokens() const { return s * b; }
  std::int64_t sharded_hidden() const { return tokens() * h / seq_shard; }  // sbh, /t under SP
  std::int64_t sharded_tokens() const { return tokens() / seq_shard; }
};

class ListBuilder {
 public:
  explicit ListBuilder(const Dims& dims) : dims_(dims) {}
  void act(std::string name, std::int64_t elements) {
    list_.push_back({std::move(name), elements, dims_.act_bytes});
  }
  void fp32(std::string name, std::int64_t elements) { list_.push_back({std::move(name), elements, kFp32}); }
  void int32(std::string name, std::int64_t elements) {
    list_.push_back({std::move(name), elements, kInt32});
  }
  std::vector<SavedTensor> take() { return std::move(list_); }

 private:
  const Dims& dims_;
  std::vector<SavedTensor> list_;
};

// A norm over sequence-sharded hidden states: its input, fp32 statistics (rstd; LayerNorm also the
// mean) and, unless recomputed, its output (the next GEMM's input).
void add_norm(ListBuilder& out, const Dims& x, const std::string& name, bool layer_norm, bool keep_output) {
  out.act(name + ".input", x.sharded_hidden());
  out.fp32(name + ".stats", (layer_norm ? 2 : 1) * x.sharded_tokens());
  if (keep_output) out.act(name + ".output", x.sharded_hidden());
}

// Flash attention: q, k, v after RoPE (its inputs), its output (o_proj's input), the logsumexp.
void add_attention(ListBuilder& out, const Dims& x) {
  out.act("attn.qkv", x.tokens() * x.d * (x.local_heads + 2 * x.local_kv_heads));
  out.act("attn.output", x.tokens() * x.d * x.local_heads);
  out.fp32("attn.logsumexp", x.b * x.local_heads * x.s);
}

// Routed experts (expert tensor parallel 1; model/moe_block.h), see expert_token_slots: the router's
// probabilities, each routed token's choices, weights and slots, the sequences' expert counts, and
// the experts' static slot buffers.
// Every rank routes all of its (tp group's) tokens.
void add_moe(ListBuilder& out, const Dims& x, const config::JobSpec& spec, bool keep_activation) {
  const config::MoeSpec& moe = *spec.model.moe;
  const std::int64_t routed = x.tokens();
  const std::int64_t slots = expert_token_slots(spec);
  out.fp32("moe.router_probs", routed * moe.experts);
  out.int32("moe.choice", routed * moe.top_k);
  out.fp32("moe.weight", routed * moe.top_k);
  out.int32("moe.slot", routed * moe.top_k);
  out.fp32("moe.counts", x.b * moe.experts);
  out.act("moe.expert_input", slots * x.h);
  out.act("moe.w1", slots * x.f);
  out.act("moe.w3", slots * x.f);
  if (keep_activation) out.act("moe.swiglu", slots * x.f);
  out.act("moe.expert_output", slots * x.h);
}

// The gradients at an MoE block's linear outputs: the router's logits, the experts' w1, w3 and w2.
void add_moe_output_grads(ListBuilder& out, const Dims& x, const config::JobSpec& spec) {
  const std::int64_t slots = expert_token_slots(spec);
  out.act("moe.d_router_logits", x.tokens() * spec.model.moe->experts);
  out.act("moe.d_w1", slots * x.f);
  out.act("moe.d_w3", slots * x.f);
  out.act("moe.d_expert_output", slots * x.h);
}

}  // namespace

std::vector<SavedTensor> layer_saved_activations(const config::JobSpec& spec, config::Recompute mode) {
  const Dims x(spec);
  ListBuilder out(x);
  if (mode == config::Recompute::Full) {
    out.act("layer.input", x.sharded_hidden());
    return out.take();
  }
  const bool keep_recomputable = mode == config::Recompute::None;
  const std::int64_t local_ffn = x.tokens() * x.f / x.t;
  switch (spec.model.arch) {
    case config::Arch::Gpt2:
      add_norm(out, x, "ln_1", true, keep_recomputable);
      add_attention(out, x);
      add_norm(out, x, "ln_2", true, keep_recomputable);
      out.act("mlp.fc", local_ffn);
      if (keep_recomputable) out.act("mlp.gelu", local_ffn);
      break;
    case config::Arch::Llama:
      add_norm(out, x, "attn_norm", false, keep_recomputable);
      add_attention(out, x);
      add_norm(out, x, "ffn_norm", false, keep_recomputable);
      out.act("mlp.gate", local_ffn);
      out.act("mlp.up", local_ffn);
      if (keep_recomputable) out.act("mlp.swiglu", local_ffn);
      break;
    case config::Arch::Mixtral:
      add_norm(out, x, "attn_norm", false, keep_recomputable);
      add_attention(out, x);
      add_norm(out, x, "ffn_norm", false, keep_recomputable);
      add_moe(out, x, spec, keep_recomputable);
      break;
  }
  return out.take();
}

std::vector<SavedTensor> embedding_saved_activations(const config::JobSpec& spec) {
  const Dims x(spec);
  ListBuilder out(x);
  out.int32("embedding.token_ids", x.tokens());
  return out.take();
}

std::vector<SavedTensor> head_saved_activations(const config::JobSpec& spec) {
  const Dims x(spec);
  ListBuilder out(x);
  add_norm(out, x, "final_norm", spec.model.arch == config::Arch::Gpt2, true);
  out.act("head.logits", x.tokens() * spec.model.padded_vocab / x.t);
  out.int32("loss.targets", x.tokens());
  out.fp32("loss.per_token", x.tokens());
  if (x.t > 1)
    out.fp32("loss.shard_stats", x.t * x.tokens() * kernels::kCrossEntropyShardStats);  // every shard's
  return out.take();
}

std::vector<SavedTensor> layer_weight_grad_inputs(const config::JobSpec& spec) {
  const Dims x(spec);
  ListBuilder out(x);
  const std::int64_t q = x.tokens() * x.d * x.local_heads, kv = x.tokens() * x.d * x.local_kv_heads;
  out.act("d_q", q);
  out.act("d_k", kv);
  out.act("d_v", kv);
  out.act("d_attention_output", x.sharded_hidden());
  if (spec.model.moe) {
    add_moe_output_grads(out, x, spec);
    return out.take();
  }
  out.act("d_mlp_output", x.sharded_hidden());
  const std::int64_t ffn = x.tokens() * x.f / x.t;
  out.act("d_mlp_up", ffn);
  if (spec.model.arch != config::Arch::Gpt2) out.act("d_mlp_gate", ffn);
  return out.take();
}

std::vector<SavedTensor> backward_workspace(const config::JobSpec& spec) {
  const Dims x(spec);
  std::vector<SavedTensor> out;
  if (spec.train.recompute == config::Recompute::Full) {
    // A whole layer rebuilt, but for its input: full recompute keeps that per layer already.
    out = layer_saved_activations(spec, config::Recompute::None);
    out.erase(out.begin());
  } else if (spec.train.recompute == config::Recompute::Selective) {
    // What selective recompute drops: the two norm outputs and the MLP activation output.
    const std::vector<SavedTensor> all = layer_saved_activations(spec, config::Recompute::None);
    const std::vector<SavedTensor> kept = layer_saved_activations(spec, config::Recompute::Selective);
    for (const SavedTensor& t : all) {
      const bool is_kept = std::any_of(kept.begin(), kept.end(), [&](const SavedTensor& k) { return k.name == t.name; });
      if (!is_kept) out.push_back({"recomputed." + t.name, t.elements, t.bytes_per_element});
    }
  }
  ListBuilder temps(x);
  const std::int64_t q = x.tokens() * x.d * x.local_heads, kv = x.tokens() * x.d * x.local_kv_heads;
  const std::int64_t ffn = x.tokens() * x.f / x.t;
  // A row-parallel output and a column-parallel input gradient are full-token partial sums before
  // their sum over tp; under sequence parallelism the residual gradient is this rank's tokens, and
  // the column-parallel inputs and row-parallel output gradients are all-gathered into full tokens.
  const std::int64_t full_hidden = x.tokens() * x.h;
  temps.act("projection_output", full_hidden);
  temps.act("d_residual", x.sharded_hidden());
  temps.act("d_norm", full_hidden);
  temps.act("d_scratch", full_hidden);
  if (x.seq_shard > 1) {
    temps.act("sequence_parallel.gathered_input", full_hidden);
    temps.act("sequence_parallel.gathered_gradient", full_hidden);
  }
  if (spec.parallel.cp > 1) {  // the whole sequence's k and v, their gradients, the collectives' staging
    const std::int64_t sequence_kv = kv * spec.parallel.cp;
    temps.act("context_parallel.keys", sequence_kv);
    temps.act("context_parallel.values", sequence_kv);
    temps.act("context_parallel.d_keys", sequence_kv);
    temps.act("context_parallel.d_values", sequence_kv);
    temps.act("context_parallel.staging", 2 * sequence_kv);
  }
  temps.act("d_attention", q);
  temps.act("d_q", q);
  temps.act("d_k", kv);
  temps.act("d_v", kv);
  if (spec.model.moe) {
    // The output gradients, the combine weights' gradient, the experts' SwiGLU and input gradients,
    // one expert's w3 input gradient before it is added.
    add_moe_output_grads(temps, x, spec);
    const std::int64_t slots = expert_token_slots(spec);
    temps.fp32("moe.d_weight", x.tokens() * spec.model.moe->top_k);
    temps.act("moe.d_activation", slots * x.f);
    temps.act("moe.d_expert_input", slots * x.h);
    temps.act("moe.d_partial", slots / spec.model.moe->experts * x.h);  // one source rank's block
    if (spec.parallel.ep > 1 &&
        spec.parallel.ep != spec.parallel.tp)  // the all-to-all's buffer (not over tp)
      temps.act("moe.exchange", slots * x.h);
  } else {
    // GPT-2 fuses GELU's backward into the down projection's input-gradient GEMM: no d_activation.
    const bool swiglu = spec.model.arch != config::Arch::Gpt2;
    if (swiglu) temps.act("d_mlp_activation", ffn);
    temps.act("d_mlp_up", ffn);
    if (swiglu) temps.act("d_mlp_gate", ffn);
  }
  for (SavedTensor& t : temps.take()) out.push_back(std::move(t));
  return out;
}

int expert_capacity(const config::JobSpec& spec) {
  if (!spec.model.moe) return 0;
  const config::MoeSpec& moe = *spec.model.moe;
  const int T = spec.model.seq_len;
  const double wanted = std::ceil(moe.capacity_factor * moe.top_k * static_cast<double>(T) / moe.experts);
  return static_cast<int>(std::min<double>(T, wanted));
}

std::int64_t expert_token_slots(const config::JobSpec& spec) {
  if (!spec.model.moe) return 0;
  const config::ParallelSpec& p = spec.parallel;
  const std::int64_t sequences = static_cast<std::int64_t>(spec.train.micro_batch) * p.ep;
  const std::int64_t sharers = static_cast<std::int64_t>(p.cp) * (p.sequence_parallel ? p.tp : 1);
  const std::int64_t per_expert = (sequences * expert_capacity(spec) + sharers - 1) / sharers;
  return spec.model.moe->experts / p.ep * per_expert;
}

double total_bytes(const std::vector<SavedTensor>& tensors) {
  double sum = 0;
  for (const SavedTensor& t : tensors) sum += t.bytes();
  return sum;
}

}  // namespace ptrain::model
