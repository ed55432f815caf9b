#include "engine/model/layer_description.h"

#include <algorithm>
#include <cmath>

#include "engine/config/moe_capacity.h"
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
  std::int64_t cp;
  config::CpComm cp_comm;
  int act_bytes;
  bool gpt2;
  bool fp8;          // the linear layers in FP8
  bool fp8_current;  // ... under current scaling

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
    cp = spec.parallel.cp;
    cp_comm = spec.parallel.cp_comm;
    act_bytes = config::bf16_working(spec.train.precision) ? 2 : 4;
    gpt2 = m.arch == config::Arch::Gpt2;
    fp8 = spec.train.precision == config::Precision::Fp8;
    fp8_current = fp8 && spec.train.fp8.scaling == config::Fp8Scaling::Current;
  }
  std::int64_t tokens() const { return s * b; }
  std::int64_t sharded_hidden() const { return tokens() * h / seq_shard; }  // sbh, /t under SP
  std::int64_t sharded_tokens() const { return tokens() / seq_shard; }
  std::int64_t q_cols() const { return local_heads * d; }
  std::int64_t kv_cols() const { return local_kv_heads * d; }
  std::int64_t local_ffn() const { return f / t; }
  // cp_comm a2a: each cp rank's query heads and kv heads (copied where fewer than cp) of the whole
  // sequence (parallel/context_parallel.h).
  std::int64_t a2a_heads() const { return local_heads / cp; }
  std::int64_t a2a_kv_heads() const { return std::max<std::int64_t>(local_kv_heads / cp, 1); }
  std::int64_t a2a_kv() const { return b * s * cp * a2a_kv_heads() * d; }  // one of k, v in head layout
  // cp_comm ring: one query chunk's rows ([B, L, heads]) of the rank's two.
  std::int64_t ring_chunk_rows() const { return b * s / 2; }
  double hidden_bytes() const { return static_cast<double>(tokens() * h) * act_bytes; }  // sbh
};

SavedTensor act(const Dims& x, ArenaTensor id, const char* name, std::int64_t elements, bool recomputable = false) {
  return {id, name, elements, Element::Activation, x.act_bytes, recomputable};
}
SavedTensor fp32(ArenaTensor id, const char* name, std::int64_t elements) {
  return {id, name, elements, Element::F32, kFp32, false};
}
SavedTensor int32(ArenaTensor id, const char* name, std::int64_t elements) {
  return {id, name, elements, Element::I32, kInt32, false};
}

Op make_op(const char* name, OpKind kind) {
  Op op;
  op.name = name;
  op.kind = kind;
  return op;
}
Op gemm(const char* name, GemmShape shape, std::vector<SavedTensor> saves = {}) {
  Op op = make_op(name, OpKind::Gemm);
  op.gemm = shape;
  op.saves = std::move(saves);
  return op;
}
// A linear layer's GEMM: in FP8 under train.precision fp8.
Op linear(const Dims& x, const char* name, GemmShape shape, std::vector<SavedTensor> saves = {}) {
  Op op = gemm(name, shape, std::move(saves));
  op.fp8 = x.fp8;
  return op;
}
// A linear layer that reads the previous one's input (under fp8 its codes: model::SharedInput).
Op linear_on_same_input(const Dims& x, const char* name, GemmShape shape, std::vector<SavedTensor> saves = {}) {
  Op op = linear(x, name, shape, std::move(saves));
  op.fp8_input_shared = x.fp8;
  return op;
}
// A layer's linear (not an expert's) under fp8 current scaling (kFp8InputAmaxes,
// kFp8OutputGradAmaxes): its input's and output gradient's amaxes kept for the weight gradient; also
// written beside the input by the op before it, and beside the output gradient by the activation's
// backward, where those say so.
Op with_known_amaxes(const Dims& x, Op op, bool input_written, bool output_grad_written) {
  op.fp8_amaxes_kept = x.fp8_current;
  op.fp8_input_amax_written = x.fp8_current && input_written;
  op.fp8_output_grad_amax_written = x.fp8_current && output_grad_written;
  return op;
}
Op memory_op(const char* name, OpKind kind, double bytes, std::vector<SavedTensor> saves = {}) {
  Op op = make_op(name, kind);
  op.memory_bytes = bytes;
  op.saves = std::move(saves);
  return op;
}
Op collective(const char* name, CollectiveStep step) {
  Op op = make_op(name, OpKind::Collective);
  op.collective = std::move(step);
  return op;
}

// The residual stream into a column-parallel layer over tp: under sequence parallelism all-gathered
// (backward: gathered again for the weight gradient, and the input gradient reduce-scattered),
// else replicated (backward: the input gradient's partial sums all-reduced).
void add_column_parallel_input(std::vector<Op>& ops, const Dims& x, const config::JobSpec& spec,
                               const char* name) {
  if (x.t == 1) return;
  using K = CollectiveKind;
  if (spec.parallel.sequence_parallel)
    ops.push_back(collective(name, {Axis::Tp, static_cast<int>(x.t), x.hidden_bytes(), {K::AllGather},
                                    {K::AllGather, K::ReduceScatter}}));
  else
    ops.push_back(collective(name, {Axis::Tp, static_cast<int>(x.t), x.hidden_bytes(), {}, {K::AllReduce}}));
}

// A row-parallel layer's partial sums over tp into the residual stream: reduce-scattered under
// sequence parallelism (backward: the output gradient all-gathered), else all-reduced.
void add_row_parallel_output(std::vector<Op>& ops, const Dims& x, const config::JobSpec& spec,
                             const char* name) {
  if (x.t == 1) return;
  using K = CollectiveKind;
  if (spec.parallel.sequence_parallel)
    ops.push_back(collective(name, {Axis::Tp, static_cast<int>(x.t), x.hidden_bytes(), {K::ReduceScatter},
                                    {K::AllGather}}));
  else
    ops.push_back(collective(name, {Axis::Tp, static_cast<int>(x.t), x.hidden_bytes(), {K::AllReduce}, {}}));
}

// The names of a norm's tensors.
struct NormNames {
  const char *op, *input, *mean, *rstd, *output;
};
constexpr NormNames kLn1{"ln_1", "ln_1.input", "ln_1.mean", "ln_1.rstd", "ln_1.output"};
constexpr NormNames kLn2{"ln_2", "ln_2.input", "ln_2.mean", "ln_2.rstd", "ln_2.output"};
constexpr NormNames kAttnNorm{"attn_norm", "attn_norm.input", "attn_norm.mean", "attn_norm.rstd", "attn_norm.output"};
constexpr NormNames kFfnNorm{"ffn_norm", "ffn_norm.input", "ffn_norm.mean", "ffn_norm.rstd", "ffn_norm.output"};
constexpr NormNames kFinalNorm{"final_norm", "final_norm.input", "final_norm.mean", "final_norm.rstd",
                               "final_norm.output"};

// A norm over sequence-sharded hidden states (after the residual add it is fused with): its
// input, fp32 statistics (rstd; LayerNorm also the mean) and its output (the next GEMM's input,
// recomputable).
Op norm(const Dims& x, const NormNames& names, ArenaTensor input, ArenaTensor mean, ArenaTensor rstd,
        ArenaTensor output) {
  std::vector<SavedTensor> saves{act(x, input, names.input, x.sharded_hidden())};
  if (x.gpt2) saves.push_back(fp32(mean, names.mean, x.sharded_tokens()));
  saves.push_back(fp32(rstd, names.rstd, x.sharded_tokens()));
  saves.push_back(act(x, output, names.output, x.sharded_hidden(), true));
  // Reads the residual stream and the branch output, writes their sum and the norm output.
  return memory_op(names.op, x.gpt2 ? OpKind::LayerNorm : OpKind::Norm, 4.0 * x.sharded_hidden() * x.act_bytes,
                   std::move(saves));
}

// The collectives that bring the other cp ranks' keys to this rank's queries (context_parallel.h).
void add_context_exchange(std::vector<Op>& ops, const Dims& x, const config::JobSpec& spec, double kv_bytes) {

  using K = CollectiveKind;
  const int cp = static_cast<int>(x.cp);
  switch (x.cp_comm) {
    case config::CpComm::Allgather: {
      // The whole sequence's k and v; backward gathers them again (under full recompute the redone
      // forward just did) and reduce-scatters their gradients.
      const bool regather = spec.train.recompute != config::Recompute::Full;
      ops.push_back(collective("attn.sequence_kv",
                               {Axis::Cp, cp, cp * kv_bytes, {K::AllGather},
                                regather ? std::vector<K>{K::AllGather, K::ReduceScatter}
                                         : std::vector<K>{K::ReduceScatter}}));
      return;
    }
    case config::CpComm::Ring: {
      // k and v pass cp - 1 hops forward; in backward again, and their gradients cp hops (the last
      // one home).
      const std::vector<K> hops(static_cast<std::size_t>(cp - 1), K::SendRecv);
      std::vector<K> backward = hops;
      backward.insert(backward.end(), static_cast<std::size_t>(cp), K::SendRecv);
      ops.push_back(collective("attn.ring_kv",
                               {Axis::Cp, cp, static_cast<double>(ring_message_bytes(spec)), hops, backward}));
      return;
    }
    case config::CpComm::A2a:
      // q, k, v to head layout (their gradients back in backward) ...
      ops.push_back(collective(
          "attn.heads_qkv",
          {Axis::Cp, cp,
           static_cast<double>(cp * x.tokens() * x.d * (x.a2a_heads() + 2 * x.a2a_kv_heads())) * x.act_bytes,
           {K::AllToAll}, {K::AllToAll}}));
      return;
  }
}

// q, k, v (RoPE'd for llama), flash attention over the sequence (its other chunks on the other cp
// ranks), the output projection and its sum over tp.
void add_attention(std::vector<Op>& ops, const Dims& x, const config::JobSpec& spec) {
  const std::int64_t N = x.tokens(), C = x.h;
  const int cp = spec.parallel.cp;
  const bool a2a = cp > 1 && x.cp_comm == config::CpComm::A2a;
  using K = CollectiveKind;
  add_column_parallel_input(ops, x, spec, "attn.input");
  ops.push_back(with_known_amaxes(x, linear(x, "attn.q_proj", {N, x.q_cols(), C}), true, false));
  ops.push_back(with_known_amaxes(x, linear_on_same_input(x, "attn.k_proj", {N, x.kv_cols(), C}), true, false));
  ops.push_back(with_known_amaxes(x, linear_on_same_input(x, "attn.v_proj", {N, x.kv_cols(), C}), true, false));
  const double kv_bytes = 2.0 * static_cast<double>(N * x.kv_cols()) * x.act_bytes;  // k and v
  if (!x.gpt2) ops.push_back(memory_op("attn.rope", OpKind::Rope, 2.0 * (N * (x.q_cols() + x.kv_cols())) * x.act_bytes));
  if (cp > 1) add_context_exchange(ops, x, spec, kv_bytes);
  Op core = make_op("attn.core", OpKind::Attention);
  if (cp == 1) {
    core.attention = {x.b, x.local_heads, x.local_kv_heads, x.d, {{x.s, 0}}};
  } else if (a2a) {  // whole sequences of 1/cp of the heads
    core.attention = {x.b, x.a2a_heads(), x.a2a_kv_heads(), x.d, {{x.s * cp, 0}}};
  } else {  // two chunks of L positions: rank 0's first and last (every rank's pair does as much work)
    const std::int64_t L = x.s / 2;
    core.attention = {x.b, x.local_heads, x.local_kv_heads, x.d, {{L, 0}, {L, (2 * cp - 1) * L}}};
  }
  // a2a keeps q, k, v and the output in head layout for attention's backward, and the output in
  // sequence layout for the output projection's.
  const std::int64_t kv_saved = a2a ? x.a2a_kv() : N * x.kv_cols();
  core.saves = {act(x, ArenaTensor::Q, "attn.q", N * x.q_cols()), act(x, ArenaTensor::K, "attn.k", kv_saved),
                act(x, ArenaTensor::V, "attn.v", kv_saved),
                act(x, ArenaTensor::AttentionOutput, "attn.output", N * x.q_cols()),
                fp32(ArenaTensor::AttentionLse, "attn.logsumexp", x.b * x.local_heads * x.s)};
  if (a2a) core.saves.push_back(act(x, ArenaTensor::AttentionHeadsOutput, "attn.output_heads", N * x.q_cols()));
  ops.push_back(std::move(core));
  // ... and the output back to sequence layout (its gradient to head layout in backward).
  if (a2a)
    ops.push_back(collective("attn.heads_output", {Axis::Cp, cp, static_cast<double>(N * x.q_cols()) * x.act_bytes,
                                                   {K::AllToAll}, {K::AllToAll}}));
  // kv heads replicated on t / kv_heads ranks: their k and v output gradients are summed over them.
  const int kv_heads = spec.model.kv_heads;
  if (x.t > kv_heads)
    ops.push_back(collective("attn.kv_copies", {Axis::Tp, static_cast<int>(x.t) / kv_heads, kv_bytes / 2, {},
                                                {K::AllReduce, K::AllReduce}}));
  // The attention output's amax: a pass of its own in the forward, kept for the weight gradient.
  ops.push_back(with_known_amaxes(x, linear(x, "attn.o_proj", {N, C, x.q_cols()}), false, false));
  add_row_parallel_output(ops, x, spec, "attn.output_sum");
}

void add_dense_mlp(std::vector<Op>& ops, const Dims& x) {
  const std::int64_t N = x.tokens(), C = x.h, F = x.local_ffn();
  const double ffn_bytes = static_cast<double>(N * F) * x.act_bytes;
  if (x.gpt2) {
    ops.push_back(
        with_known_amaxes(x, linear(x, "mlp.c_fc", {N, F, C}, {act(x, ArenaTensor::MlpUp, "mlp.fc", N * F)}), true, true));
    ops.push_back(memory_op("mlp.gelu", OpKind::Gelu, 2 * ffn_bytes,
                            {act(x, ArenaTensor::MlpActivation, "mlp.gelu", N * F, true)}));
    // GELU's output amax: cuBLASLt's GELU epilogue (bf16) leaves it to a pass of its own.
    ops.push_back(with_known_amaxes(x, linear(x, "mlp.c_proj", {N, C, F}), false, false));
    return;
  }
  ops.push_back(with_known_amaxes(
      x, linear(x, "mlp.gate_proj", {N, F, C}, {act(x, ArenaTensor::MlpGate, "mlp.gate", N * F)}), true, true));
  ops.push_back(with_known_amaxes(
      x, linear_on_same_input(x, "mlp.up_proj", {N, F, C}, {act(x, ArenaTensor::MlpUp, "mlp.up", N * F)}), true,
      true));
  ops.push_back(memory_op("mlp.swiglu", OpKind::Activation, 3 * ffn_bytes,
                          {act(x, ArenaTensor::MlpActivation, "mlp.swiglu", N * F, true)}));
  ops.push_back(with_known_amaxes(x, linear(x, "mlp.down_proj", {N, C, F}), true, false));
}

// Routed experts (expert tensor parallel 1; model/moe_block.h), see expert_token_slots: the router's
// probabilities, each routed token's choices, weights and slots, the sequences' expert counts, and
// the experts' static slot buffers, exchanged over ep (ep over data-parallel ranks) or split over
// the tp group (ep = tp: every rank routes all of the tp group's tokens; the combine weights'
// gradients are summed over tp).
void add_moe(std::vector<Op>& ops, const Dims& x, const config::JobSpec& spec) {
  const config::MoeSpec& moe = *spec.model.moe;
  const int ep = spec.parallel.ep;
  const std::int64_t N = x.tokens(), C = x.h, F = x.f, E = moe.experts, pairs = N * moe.top_k;
  const std::int64_t slots = config::expert_token_slots(spec);
  const double slot_bytes = static_cast<double>(slots * C) * x.act_bytes;
  using K = CollectiveKind;
  // Under cp the router's logits are gathered and the whole sequences routed on every cp rank
  // (moe_block.h): the routing tensors are the cp group's tokens'.
  const std::int64_t routed = N * x.cp, routed_pairs = routed * moe.top_k;
  ops.push_back(gemm("moe.router", {N, E, C}, {fp32(ArenaTensor::MoeProbs, "moe.router_probs", routed * E)}));
  if (x.cp > 1)
    ops.push_back(collective("moe.router_logits", {Axis::Cp, static_cast<int>(x.cp),
                                                   static_cast<double>(routed * E) * kFp32, {K::AllGather}, {}}));
  ops.push_back(memory_op("moe.route", OpKind::Routing, static_cast<double>(routed * E) * kFp32 + 3.0 * routed_pairs * 4,
                          {int32(ArenaTensor::MoeChoice, "moe.choice", routed_pairs),
                           fp32(ArenaTensor::MoeWeight, "moe.weight", routed_pairs),
                           int32(ArenaTensor::MoeSlot, "moe.slot", routed_pairs),
                           fp32(ArenaTensor::MoeCounts, "moe.counts", x.b * E)}));
  ops.push_back(memory_op("moe.dispatch", OpKind::Routing, 2 * slot_bytes,
                          {act(x, ArenaTensor::MoeExpertInput, "moe.expert_input", slots * C)}));
  const bool over_tp = spec.parallel.experts_over_tp, exchanged = ep > 1 && !over_tp;
  if (exchanged)
    ops.push_back(collective("moe.dispatch_exchange", {Axis::Ep, ep, slot_bytes, {K::AllToAll}, {K::AllToAll}}));
  // The experts run on blocks of one source rank's slots for one expert.
  // The blocks read the weights of the rank's E / ep experts.
  const std::int64_t rows = config::expert_block_rows(spec), blocks = slots / rows;
  auto experts = [&](Op op) {
    op.weights = E / ep;
    ops.push_back(std::move(op));
  };
  experts(linear(x, "moe.w1", {rows, F, C, blocks}, {act(x, ArenaTensor::MoeGate, "moe.w1", slots * F)}));
  experts(linear_on_same_input(x, "moe.w3", {rows, F, C, blocks}, {act(x, ArenaTensor::MoeUp, "moe.w3", slots * F)}));
  ops.push_back(memory_op("moe.swiglu", OpKind::Activation, 3.0 * slots * F * x.act_bytes,
                          {act(x, ArenaTensor::MoeActivation, "moe.swiglu", slots * F, true)}));
  experts(linear(x, "moe.w2", {rows, C, F, blocks},
                 {act(x, ArenaTensor::MoeExpertOutput, "moe.expert_output", slots * C)}));
  if (exchanged)
    ops.push_back(collective("moe.combine_exchange", {Axis::Ep, ep, slot_bytes, {K::AllToAll}, {K::AllToAll}}));
  ops.push_back(memory_op("moe.combine", OpKind::Routing, slot_bytes + 2.0 * N * C * x.act_bytes));
  if (over_tp)
    ops.push_back(collective("moe.combine_weights", {Axis::Tp, static_cast<int>(x.t),
                                                     static_cast<double>(pairs) * kFp32, {}, {K::AllReduce}}));
}

}  // namespace

double AttentionShape::forward_flops() const {
  double visible = 0;  // query-key pairs per sequence and head
  for (const QueryBlock& q : blocks)
    visible += static_cast<double>(q.rows) * q.first + static_cast<double>(q.rows) * (q.rows + 1) / 2.0;
  return 4.0 * visible * static_cast<double>(batch) * heads * head_dim;  // QK^T and AV, 2 FLOPs a MAC
}

std::vector<Op> layer_ops(const config::JobSpec& spec) {
  const Dims x(spec);
  using T = ArenaTensor;
  std::vector<Op> ops;
  ops.reserve(24);
  ops.push_back(norm(x, x.gpt2 ? kLn1 : kAttnNorm, T::LayerInput, T::Norm1Mean, T::Norm1Rstd, T::Norm1Output));
  // The amaxes of the linear layers' inputs, kept for the weight gradients' casts (model::Fp8InputAmax).
  if (x.fp8_current) ops.back().saves.push_back(fp32(T::Fp8InputAmaxes, "fp8.input_amaxes", kFp8InputAmaxes));
  add_attention(ops, x, spec);
  ops.push_back(norm(x, x.gpt2 ? kLn2 : kFfnNorm, T::MidResidual, T::Norm2Mean, T::Norm2Rstd, T::Norm2Output));
  add_column_parallel_input(ops, x, spec, "mlp.input");
  if (spec.model.moe)
    add_moe(ops, x, spec);
  else
    add_dense_mlp(ops, x);
  add_row_parallel_output(ops, x, spec, "mlp.output_sum");
  return ops;
}

std::vector<Op> embedding_ops(const config::JobSpec& spec) {
  const Dims x(spec);
  std::vector<Op> ops;
  // Each tp rank looks up the rows of its vocabulary shard; their sum is the embedding.
  ops.push_back(memory_op("embedding", OpKind::Embedding, 2.0 * x.tokens() * x.h * x.act_bytes,
                          {int32(ArenaTensor::TokenIds, "embedding.token_ids", x.tokens())}));
  if (x.t > 1) {
    using K = CollectiveKind;
    const bool sp = spec.parallel.sequence_parallel;
    ops.push_back(collective("embedding.sum", {Axis::Tp, static_cast<int>(x.t), x.hidden_bytes(),
                                               {sp ? K::ReduceScatter : K::AllReduce},
                                               sp ? std::vector<K>{K::AllGather} : std::vector<K>{}}));
  }
  return ops;
}

std::vector<Op> head_ops(const config::JobSpec& spec) {
  const Dims x(spec);
  using T = ArenaTensor;
  std::vector<Op> ops;
  Op final_norm = norm(x, kFinalNorm, T::FinalNormInput, T::FinalNormMean, T::FinalNormRstd, T::FinalNormOutput);
  final_norm.saves.back().recomputable = false;  // recompute applies to the layers
  ops.push_back(std::move(final_norm));
  add_column_parallel_input(ops, x, spec, "head.input");
  const std::int64_t N = x.tokens(), V = spec.model.padded_vocab / x.t;
  ops.push_back(gemm("head", {N, V, x.h}, {act(x, T::Logits, "head.logits", N * V)}));
  Op loss = memory_op("loss", OpKind::Loss, 2.0 * N * V * x.act_bytes,
                      {int32(T::Targets, "loss.targets", N), fp32(T::TokenLosses, "loss.per_token", N)});
  if (x.t > 1)  // every shard's statistics
    loss.saves.push_back(fp32(T::LossShardStats, "loss.shard_stats", x.t * N * kernels::kCrossEntropyShardStats));
  ops.push_back(std::move(loss));
  if (x.t > 1)
    ops.push_back(collective("loss.shard_stats", {Axis::Tp, static_cast<int>(x.t),
                                                  x.t * static_cast<double>(N) * kernels::kCrossEntropyShardStats * kFp32,
                                                  {CollectiveKind::AllGather}, {}}));
  return ops;
}

ModelOps model_ops(const config::JobSpec& spec) {
  return {layer_ops(spec), embedding_ops(spec), head_ops(spec)};
}

std::vector<SavedTensor> saved_tensors(const std::vector<Op>& ops, config::Recompute mode) {
  std::vector<SavedTensor> out;
  for (const Op& op : ops) {
    for (const SavedTensor& t : op.saves) {
      if (mode == config::Recompute::Full && t.id != ArenaTensor::LayerInput) continue;
      if (mode == config::Recompute::Selective && t.recomputable) continue;
      out.push_back(t);
    }
  }
  return out;
}

std::vector<SavedTensor> layer_saved_activations(const config::JobSpec& spec, config::Recompute mode) {
  return saved_tensors(layer_ops(spec), mode);
}

std::vector<SavedTensor> embedding_saved_activations(const config::JobSpec& spec) {
  return saved_tensors(embedding_ops(spec), config::Recompute::None);
}

std::vector<SavedTensor> head_saved_activations(const config::JobSpec& spec) {
  return saved_tensors(head_ops(spec), config::Recompute::None);
}

std::vector<SavedTensor> layer_output_grads(const config::JobSpec& spec, bool residual_copies) {
  const Dims x(spec);
  using T = ArenaTensor;
  const std::int64_t N = x.tokens();
  std::vector<SavedTensor> out{act(x, T::DQ, "d_q", N * x.q_cols()), act(x, T::DK, "d_k", N * x.kv_cols()),
                               act(x, T::DV, "d_v", N * x.kv_cols())};
  if (residual_copies) out.push_back(act(x, T::DAttentionOutput, "d_attention_output", x.sharded_hidden()));
  // Their amaxes (model::Fp8OutputGradAmax).
  if (x.fp8_current) out.push_back(fp32(T::Fp8OutputGradAmaxes, "fp8.output_gradient_amaxes", kFp8OutputGradAmaxes));
  if (spec.model.moe) {
    const std::int64_t slots = config::expert_token_slots(spec);
    out.push_back(act(x, T::MoeDLogits, "moe.d_router_logits", N * spec.model.moe->experts));
    out.push_back(act(x, T::MoeDGate, "moe.d_w1", slots * x.f));
    out.push_back(act(x, T::MoeDUp, "moe.d_w3", slots * x.f));
    out.push_back(act(x, T::MoeDExpertOutput, "moe.d_expert_output", slots * x.h));
    return out;
  }
  if (residual_copies) out.push_back(act(x, T::DMlpOutput, "d_mlp_output", x.sharded_hidden()));
  out.push_back(act(x, T::DMlpUp, "d_mlp_up", N * x.local_ffn()));
  if (!x.gpt2) out.push_back(act(x, T::DMlpGate, "d_mlp_gate", N * x.local_ffn()));
  return out;
}

std::vector<SavedTensor> layer_weight_grad_inputs(const config::JobSpec& spec) {
  return layer_output_grads(spec, true);
}

std::vector<SavedTensor> recomputed_tensors(const config::JobSpec& spec) {
  std::vector<SavedTensor> out;
  if (spec.train.recompute == config::Recompute::None) return out;
  const std::vector<Op> ops = layer_ops(spec);
  const std::vector<SavedTensor> all = saved_tensors(ops, config::Recompute::None);
  const std::vector<SavedTensor> kept = saved_tensors(ops, spec.train.recompute);
  for (const SavedTensor& t : all) {
    const bool is_kept = std::any_of(kept.begin(), kept.end(), [&](const SavedTensor& k) { return k.id == t.id; });
    if (!is_kept) out.push_back({t.id, t.name, t.elements, t.element, t.bytes_per_element, false});
  }
  return out;
}

namespace {

// Context parallelism's temporaries (parallel/context_parallel.h), by cp_comm.
void add_context_workspace(std::vector<SavedTensor>& out, const Dims& x) {
  using T = ArenaTensor;
  auto add = [&](T id, const char* name, std::int64_t elements) { out.push_back(act(x, id, name, elements)); };
  const std::int64_t N = x.tokens(), kv = N * x.kv_cols();
  switch (x.cp_comm) {
    case config::CpComm::Allgather:  // the whole sequence's k and v, their gradients, the collectives' staging
      add(T::CpKeys, "context_parallel.keys", kv * x.cp);
      add(T::CpValues, "context_parallel.values", kv * x.cp);
      add(T::CpDKeys, "context_parallel.d_keys", kv * x.cp);
      add(T::CpDValues, "context_parallel.d_values", kv * x.cp);
      add(T::CpStaging, "context_parallel.staging", 2 * kv * x.cp);
      return;
    case config::CpComm::Ring:  // two ranks' k and v (the one in hand, the one arriving), and their gradients
      add(T::CpRingKv, "context_parallel.ring_kv", 4 * kv);
      add(T::CpRingDKv, "context_parallel.ring_d_kv", 4 * kv);
      // One block's output (forward) or d_q (backward), its log-sum-exp, and its d_k and d_v.
      add(T::CpRingPart, "context_parallel.ring_part", x.ring_chunk_rows() * x.q_cols());
      out.push_back(fp32(T::CpRingPartLse, "context_parallel.ring_part_lse", x.ring_chunk_rows() * x.local_heads));
      add(T::CpRingPartDKv, "context_parallel.ring_part_d_kv", 2 * x.ring_chunk_rows() * x.kv_cols());
      return;
    case config::CpComm::A2a: {
      // This rank's q, k, v in sequence layout (forward), their gradients in head layout (backward);
      // the output gradient in head layout; the all-to-all's send and receive staging.
      const std::int64_t kv_either = std::max(kv, x.a2a_kv());
      add(T::CpA2aQ, "context_parallel.a2a_q", N * x.q_cols());
      add(T::CpA2aK, "context_parallel.a2a_k", kv_either);
      add(T::CpA2aV, "context_parallel.a2a_v", kv_either);
      add(T::CpA2aDOutput, "context_parallel.a2a_d_output", N * x.q_cols());
      const std::int64_t exchange = x.cp * N * x.d * (x.a2a_heads() + 2 * x.a2a_kv_heads());
      add(T::CpA2aSend, "context_parallel.a2a_send", exchange);
      add(T::CpA2aRecv, "context_parallel.a2a_recv", exchange);
      return;
    }
  }
}

}  // namespace

std::vector<SavedTensor> backward_workspace(const config::JobSpec& spec) {
  const Dims x(spec);
  using T = ArenaTensor;
  std::vector<SavedTensor> out = recomputed_tensors(spec);
  auto add = [&](T id, const char* name, std::int64_t elements) { out.push_back(act(x, id, name, elements)); };
  // A row-parallel output and a column-parallel input gradient are full-token partial sums before
  // their sum over tp; under sequence parallelism the residual gradient is this rank's tokens, and
  // the column-parallel inputs and row-parallel output gradients are all-gathered into full tokens.
  const std::int64_t N = x.tokens(), full_hidden = N * x.h;
  add(T::ProjectionOutput, "projection_output", full_hidden);
  add(T::DResidual, "d_residual", x.sharded_hidden());
  add(T::DNorm, "d_norm", full_hidden);
  if (x.seq_shard > 1) {
    add(T::SpGatheredInput, "sequence_parallel.gathered_input", full_hidden);
    add(T::SpGatheredGradient, "sequence_parallel.gathered_gradient", full_hidden);
  }
  if (spec.parallel.cp > 1) add_context_workspace(out, x);
  add(T::DAttention, "d_attention", N * x.q_cols());
  for (SavedTensor& t : layer_output_grads(spec, false)) out.push_back(std::move(t));
  if (spec.model.moe) {
    // The combine weights' gradient, the experts' SwiGLU and input gradients, and the all-to-all's
    // buffer (not over tp).
    const std::int64_t slots = config::expert_token_slots(spec);
    out.push_back(fp32(T::MoeDWeight, "moe.d_weight", N * spec.model.moe->top_k));
    add(T::MoeDActivation, "moe.d_activation", slots * x.f);
    add(T::MoeDExpertInput, "moe.d_expert_input", slots * x.h);
    if (spec.parallel.ep > 1 && !spec.parallel.experts_over_tp) add(T::MoeExchange, "moe.exchange", slots * x.h);
    if (spec.parallel.cp > 1) {  // this rank's routing out of the whole sequences', and back
      const std::int64_t E = spec.model.moe->experts, pairs = N * spec.model.moe->top_k;
      out.push_back(int32(T::MoeCpOwnSlot, "moe.cp_own_slot", pairs));
      out.push_back(fp32(T::MoeCpOwnWeight, "moe.cp_own_weight", pairs));
      out.push_back(fp32(T::MoeCpLogits, "moe.cp_logits", N * E));
      out.push_back(fp32(T::MoeCpLogitsStaging, "moe.cp_logits_staging", x.cp * N * E));
      out.push_back(fp32(T::MoeCpDWeight, "moe.cp_sequence_d_weight", x.cp * pairs));
      add(T::MoeCpDLogits, "moe.cp_sequence_d_logits", x.cp * N * E);
    }
  } else if (!x.gpt2) {
    // GPT-2 fuses GELU's backward into the down projection's input-gradient GEMM: no d_activation.
    add(T::DMlpActivation, "d_mlp_activation", N * x.local_ffn());
  }
  if (spec.train.precision == config::Precision::Fp8) {
    // One linear layer at a time (model/block_linears.h): its input, weight and output gradient
    // cast to FP8 codes, a byte each (the widest of q/k/v, the output projections and the MLP's): the
    // input and weight as the forward reads them or transposed for the backward, in one buffer each;
    // the output gradient as it is and transposed, both read by the backward. The three amaxes and
    // the casts' inverse scales.
    // MoE: an expert GEMM takes expert_block_rows (more than the rank's N tokens under cp when the
    // capacity is high) at the experts' whole ffn width (they are not split over tp with FP8).
    const std::int64_t rows = spec.model.moe ? std::max(N, config::expert_block_rows(spec)) : N;
    const std::int64_t ffn = spec.model.moe ? spec.model.ffn_hidden : x.local_ffn();
    const std::int64_t widest = std::max({x.h, x.q_cols(), ffn});
    auto codes = [&](T id, const char* name, Element format, std::int64_t elements) {
      out.push_back({id, name, elements, format, 1, false});
    };
    codes(T::Fp8Input, "fp8.input", Element::Fp8E4M3, rows * widest);
    codes(T::Fp8OutputGrad, "fp8.output_gradient", Element::Fp8E5M2, rows * widest);
    codes(T::Fp8OutputGradTransposed, "fp8.output_gradient_transposed", Element::Fp8E5M2, rows * widest);
    // A weight's codes: kept for the pass below ZeRO-3 (keeps_fp8_weight_copies), not cast here.
    if (!keeps_fp8_weight_copies(spec))
      codes(T::Fp8Weight, "fp8.weight", Element::Fp8E4M3, x.h * std::max(x.q_cols(), ffn));
    out.push_back(fp32(T::Fp8Amax, "fp8.amax", 3));
    out.push_back(fp32(T::Fp8InvScale, "fp8.inverse_scale", 3));
  }
  return out;
}

std::size_t ring_message_bytes(const config::JobSpec& spec) {
  const Dims x(spec);
  return static_cast<std::size_t>(2 * x.tokens() * x.kv_cols() * x.act_bytes);
}

double total_bytes(const std::vector<SavedTensor>& tensors) {
  double sum = 0;
  for (const SavedTensor& t : tensors) sum += t.bytes();
  return sum;
}

double forward_flops(const std::vector<Op>& ops) {
  double sum = 0;
  for (const Op& op : ops) {
    if (op.kind == OpKind::Gemm) sum += op.gemm.forward_flops();
    if (op.kind == OpKind::Attention) sum += op.attention.forward_flops();
  }
  return sum;
}

}  // namespace ptrain::model
