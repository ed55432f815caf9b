// The transformer of one model chunk (a virtual pipeline stage; on a single rank: the whole model),
// forward and backward by hand over the kernels' op set. GPT-2 (LayerNorm, GELU, learned positions, tied
// head, biases) and Llama (RMSNorm, RoPE, SwiGLU, GQA, untied, no biases) share the structure, and
// Mixtral is Llama with a sparse MoE block for the MLP (moe_block.h):
//
//   x = embed(tokens)                           (first stage)
//   for each layer:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
//   loss = cross_entropy(head(norm_f(x)))       (last stage)
//
// Tensor parallelism (Megatron-LM; parallel/tensor_parallel.h says where the ranks' partial results
// meet): q/k/v and MLP up/gate are column-parallel (this rank's heads, its slice of the MLP), the
// output projections row-parallel (their replicated biases added by tp rank 0 only), the embedding
// and the LM head vocab-parallel (this rank's rows of the padded vocabulary; the loss is the
// vocab-parallel cross-entropy). Everything between them runs replicated on the tp ranks, or, under
// sequence parallelism, on each rank's N / tp tokens of the residual stream (norms, residual adds,
// what crosses a stage boundary), all-gathered into the column-parallel layers and reduce-scattered
// out of the row-parallel ones; the norms' weight gradients are then partial sums over tp, which
// ZeRO sums before its own reduction.
//
// A chunk that is not the first starts from the activations an earlier stage sent (input(slot)); one
// that is not the last ends at its last layer's residual output (output(), to send at once), and its
// backward starts from the gradient a later stage sent (output_grad(), received right before it)
// and ends at the gradient of its input (input_grad(), to send at once). The chunks of one rank
// share one backward workspace, where those three live.
//
// Context parallelism (parallel/context_parallel.h): a rank holds two chunks of each sequence, its
// N = B * T / cp tokens chunk-major; attention reaches the other ranks' keys as parallel.cp_comm
// says (transformer_cp_allgather.cpp, transformer_cp_ring.cpp, transformer_cp_a2a.cpp), and the
// positions (RoPE, learned positions) are each chunk's own.
//
// Activations live in slots, one per microbatch in flight; what a layer keeps for backward depends
// on train.recompute (see layer_description.h, the list validate counts):
//   none      keeps every intermediate;
//   selective recomputes the norm outputs and the activation function output in backward;
//   full      keeps only each layer's input and re-runs the layer's forward in backward.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/block_linears.h"
#include "engine/model/layer_description.h"
#include "engine/model/moe_block.h"
#include "engine/model/param_store.h"
#include "engine/model/unit_hooks.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/runtime/owned_buffer.h"
#include "kernels/ops.h"

namespace ptrain::model {

struct ModelDims {
  bool gpt2 = true;
  int B = 1, T = 1,
      N = 1;  // micro batch, this rank's positions of each sequence (seq_len / cp), tokens (B*T)
  int Ns = 1;               // tokens of the residual stream here: N, or N / tp under sequence parallelism
  int C = 1, Hq = 1, Hkv = 1, D = 1, F = 1;
  int V = 1, Vp = 1;        // real and padded vocabulary
  int layers = 0;           // layers of this stage
  float eps = 1e-5f, rope_theta = 10000.0f;
};

class Transformer;

// Which part of the model a Transformer runs, and how.
struct ChunkOptions {
  int index = 0;  // of the model chunks the ParamStore holds (its coords() say which virtual stages)
  // Microbatches in flight: slots in the chunk's own arena. 0: none there; the rank places the
  // chunk's slots in a pool its chunks share (place_slots), under a schedule's cap on the
  // microbatches in flight (pipeline::RankBuffers::shared_slots).
  int slots = 1;
  // Another chunk of the rank (which must outlive this one) whose backward workspace this one uses.
  const Transformer* workspace_from = nullptr;
  // backward() computes input gradients only, weight_grad() the weight gradients later (zb-h1).
  bool split_weight_grad = false;
  // This rank's tensor-parallel group (required when parallel.tp > 1, which must be its size).
  parallel::TensorParallel* tensor_parallel = nullptr;
  // This rank's context-parallel group (required when parallel.cp > 1, which must be its size).
  parallel::ContextParallel* context_parallel = nullptr;
  // This rank's expert-parallel group (required when parallel.ep > 1, which must be its size).
  parallel::ExpertParallel* expert_parallel = nullptr;
};

class Transformer {
 public:
  Transformer(const config::JobSpec& spec, ParamStore& params, const kernels::Ops& ops,
              ChunkOptions chunk = {});

  const ModelDims& dims() const { return dims_; }
  bool first_stage() const { return first_; }  // embeds tokens
  bool last_stage() const { return last_; }    // computes the loss
  // Activations (and their gradients) crossing a stage boundary: [B*T, C] in activation_dtype().
  kernels::DType activation_dtype() const { return act_; }
  std::int64_t boundary_elements() const { return static_cast<std::int64_t>(dims_.Ns) * dims_.C; }
  std::size_t boundary_bytes() const;
  // Where a later chunk receives its input before forward(slot).
  kernels::Buf input(int slot) const;
  // What an earlier chunk sends after forward(slot), valid until the rank's next forward.
  kernels::Buf output(int slot) const;
  // Where an earlier chunk receives dLoss/d(output) right before its backward.
  kernels::Buf output_grad() const;
  // dLoss/d(input) of a later chunk's backward, valid until the rank's next backward.
  kernels::Buf input_grad() const;
  // Announces units to `hooks` (ZeRO) from now on; nullptr: the parameters are always resident.
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  // train.fp8.scaling delayed: the casts' amax histories (nullptr: current scaling).
  void set_fp8_history(const Fp8History* history) { fp8_history_ = history; }
  // train.precision fp8 below ZeRO-3 (model::keeps_fp8_weight_copies): the weights may have changed
  // since the last pass (a step's update), so their kept FP8 codes are cast again at the next use.
  // Every rank calls it before its first forward of a step or an evaluation.
  void weights_changed();
  std::int64_t fp8_weight_copy_bytes() const;  // of those codes (validate: plan/memory.cpp)
  // Bytes of the activation arena: its slots, and the backward workspace where this chunk owns it
  // (no workspace_from); not a pool's (place_slots).
  std::int64_t activation_bytes() const { return arena_.capacity_bytes(); }
  // Bytes one slot takes, its views aligned as an arena aligns them from the slot's start.
  std::int64_t slot_bytes() const { return slot_bytes_; }
  // Lays out `count` slots in a pool the rank's chunks share, slot i at `pool` + i * stride_bytes
  // (a multiple of runtime::Arena::kAlignment, at least every sharing chunk's slot_bytes()): slot i
  // of every chunk is the same memory, and the rank's executor gives it to one (chunk, microbatch)
  // at a time. The pool must outlive the chunk. Precondition: constructed with ChunkOptions::slots 0.
  void place_slots(const config::JobSpec& spec, kernels::Buf pool, std::int64_t stride_bytes, int count);

  // Forward of one microbatch (tokens, targets: [B*T] whole sequences, of which a context-parallel
  // rank takes its chunks; the first stage reads the tokens, the last the
  // targets, either may be null elsewhere) into `slot`. On the last stage the loss gradient is
  // computed here too (fused cross-entropy), scaled by grad_scale, and the sum of the token losses is
  // written to `loss_sum` (one F32 in the backend's memory) without waiting for the device, so a step
  // reads all its microbatches' losses back at once; returns the number of counted (target >= 0)
  // tokens there (0 elsewhere).
  std::int64_t forward(int slot, const std::int32_t* tokens, const std::int32_t* targets, float grad_scale,
                       kernels::Buf loss_sum);
  // Backward of the microbatch in `slot`: accumulates into the parameter gradients (with
  // split_weight_grad, only the norms' and the embedding's; the rest waits for weight_grad(slot)).
  void backward(int slot);
  // split_weight_grad: the weight gradients of the linear layers and the head of the microbatch in
  // `slot`, from the output gradients its backward kept (recomputing what train.recompute dropped).
  void weight_grad(int slot);
  // Loss only (validation), as forward: no gradient is written; the slot's logits stay readable.
  std::int64_t evaluate(int slot, const std::int32_t* tokens, const std::int32_t* targets,
                        kernels::Buf loss_sum);
  // The logits [N, Vp] of the last evaluate() into `slot`, this rank's tokens (under context
  // parallelism its chunks, chunk-major) (CPU backend in fp32: device memory is not host-readable;
  // std::logic_error otherwise).
  const float* logits(int slot) const;

 private:
  using Buf = kernels::Buf;

  using TensorAt = ParamStore::TensorAt;
  // Where one layer's tensors sit in the ParamStore (none where the arch has none), resolved from
  // their names once, at construction: a tensor never moves within its unit. GPT-2's fused c_attn
  // is three tensors here (q, k, v rows), as its bias is.
  struct LinearTensors {
    TensorAt wq, wk, wv, bq, bk, bv, wo, bo;  // attention projections ([out, in])
    TensorAt w_up, b_up, w_gate, w_down, b_down;  // MLP: gpt2 c_fc/c_proj (no gate); llama gate/up/down
  };
  struct ExpertTensors {
    TensorAt w1, w3, w2;
  };
  struct LayerTensors {
    TensorAt norm1_w, norm1_b, norm2_w, norm2_b;  // bias none for RMSNorm
    LinearTensors linear;
    TensorAt router;                     // mixtral: its MLP is the router and the experts,
    std::vector<ExpertTensors> experts;  // this rank's
  };
  // The model's ends' tensors, alike (none where this chunk has no such end).
  struct EndTensors {
    TensorAt word_embedding, positions;  // first stage (positions: GPT-2's)
    TensorAt head, final_norm_w, final_norm_b;  // last stage
    bool tied = false;  // the head is the word embedding (word_embedding resolved on the last stage too)
  };
  LayerTensors resolve_layer(int layer) const;  // its global index
  EndTensors resolve_ends() const;

  // Views of one layer's parameters and gradients (null where the arch has none), made from its
  // LayerTensors once the layer's unit is announced: ZeRO binds the unit's storage then (ZeRO-3
  // gathers the parameters into a window, ZeRO-2/3 bind a gradient window from before_backward to
  // after_backward), and at stages 0-1 the owned buffers never move, so a view costs an addition.
  // The norms' tensors stay TensorAt: a fused add-norm views the next unit's after announcing it.
  struct LayerWeights {
    int layer = 0;                                 // its global index
    TensorAt norm1_w, norm1_b, norm2_w, norm2_b;   // the norm ops view param and grad at use
    Buf wq, wk, wv, bq, bk, bv, wo, bo;              // attention projections ([out, in])
    Buf w_up, b_up, w_gate, w_down, b_down;          // MLP: gpt2 c_fc/c_proj (no gate); llama gate/up/down
    Buf g_wq, g_wk, g_wv, g_bq, g_bk, g_bv, g_wo, g_bo;
    Buf g_up, g_b_up, g_gate, g_down, g_b_down;
    MoeWeights moe;  // mixtral: the router and the experts instead of the MLP
  };
  // What one layer of one microbatch keeps. Tensors the recompute policy drops point into the
  // shared workspace instead of per-layer storage. Residual-stream tensors hold this rank's Ns tokens.
  struct LayerActs {
    Buf norm1, mean1, rstd1;  // norm1 output [Ns,C]; stats [Ns]
    Buf q, k, v;              // [N, Hq*D], [N, Hkv*D] (after RoPE for llama); cp_comm a2a: head layout
    Buf att, lse;             // attention output [N, Hq*D]; logsumexp [B, Hq, len] per query chunk
    Buf att_heads;            // cp_comm a2a: the attention output in head layout (lse is too)
    Buf x_mid;                // residual after attention [Ns,C]
    Buf norm2, mean2, rstd2;
    Buf up, gate;             // gpt2: up = c_fc output [N,F]; llama: gate and up [N,F]
    Buf act;                  // GELU / SwiGLU output [N,F]
    MoeActs moe;              // mixtral: the MoE block's instead of up, gate, act
    Buf fp8_amax;             // fp8 current scaling: [kFp8InputAmaxes] F32 (layer_description.h)
  };
  // What a layer's backward keeps for its weight gradients under split_weight_grad: the gradient
  // at each linear layer's output (the inputs are the layer's activations).
  struct LayerOutputGrads {
    Buf d_q, d_k, d_v;  // q/k/v projections (after RoPE's backward)
    Buf d_attention;    // the attention output projection's [Ns,C]
    Buf d_mlp;          // the MLP down projection's [Ns,C]
    Buf d_up, d_gate;   // gpt2: d_up is c_fc's (before GELU); llama: gate and up
    MoeGrads moe;       // mixtral: the MoE block's instead of d_mlp, d_up, d_gate
    Buf fp8_amax;       // fp8 current scaling: [kFp8OutputGradAmaxes] F32 (layer_description.h)
  };
  struct Slot {
    Buf tokens;                    // [N] I32: the embedding backward scatters by them
    Buf targets;                   // [N] I32: the loss reads them
    std::vector<Buf> x;            // x[l] = input of layer l; x[layers] = output of the last layer [Ns,C]
    std::vector<LayerActs> layers;
    std::vector<LayerOutputGrads> output_grads;  // split_weight_grad only
    Buf normf, meanf, rstdf;                     // final norm output [Ns,C] and stats [Ns]
    Buf logits;                    // [N, Vp], overwritten by its gradient in the fused loss
    Buf losses;                    // [N] F32
    Buf loss_stats;                // tp > 1: [tp, N, 3] F32, every vocab shard's cross-entropy stats
  };
  // Buffers shared by all layers and slots: recomputed tensors and backward temporaries.
  struct Workspace {
    LayerActs recomputed;                  // full set for recompute (full) or the dropped parts (selective)
    Buf proj_out;                          // attention / MLP output projection before the residual add [N,C]
    Buf d_res;                             // gradient of the residual stream [Ns,C]
    Buf d_norm;                            // [N,C] (partial sums over tp before their sum)
    Buf d_att;                             // [N, Hq*D]
    Buf d_act;                             // [N,F] llama only (SwiGLU)
    LayerOutputGrads outputs;  // the layer's d_q, d_k, d_v, d_up, d_gate (d_attention, d_mlp: d_res)
    Buf stage_out;             // [Ns,C] a chunk that is not the last: its output, until sent
    Buf gathered, d_full;      // sequence parallelism: [N, C] all-gathered norm outputs and gradients
    // Context parallelism: the whole sequence's k and v [B, T*cp, Hkv*D] gathered from the cp group,
    // their gradients, and the collectives' staging (twice that size).
    Buf cp_k, cp_v, cp_dk, cp_dv, cp_staging;
    // cp_comm ring: two ranks' k and v (each [2: k, v][N, Hkv*D]) and their gradients; one block's
    // output or d_q [B, L, Hq*D], log-sum-exp [B, Hq, L] and d_k, d_v.
    Buf ring_kv, ring_dkv, ring_part, ring_part_lse, ring_part_dkv;
    // cp_comm a2a: q, k, v in sequence layout (forward) or their gradients in head layout (backward),
    // the output gradient in head layout, the all-to-all's staging.
    Buf a2a_q, a2a_k, a2a_v, a2a_d_out, a2a_send, a2a_recv;
    MoeWorkspace moe;  // mixtral: the MoE block's backward temporaries
    Fp8Scratch fp8;    // train.precision fp8 (model/block_linears.h)
  };
  // Query rows attending as one block: the whole sequence, or one of a context-parallel rank's two
  // chunks, at rows [first_row, first_row + B*len) of the rank's tokens and positions pos0 onwards.
  struct QueryChunk {
    std::int64_t first_row;
    int len, pos0;
  };

  // A norm applied to a residual stream: where its output and statistics go, and its parameters'
  // names (bias empty for RMSNorm); where its output's amax goes (FP8 current scaling; else null).
  struct NormInto {
    Buf out, mean, rstd;
    TensorAt weight, bias;
    Buf amax = {};
  };

  // Gives every tensor of the layer description (model/layer_description.h: the layers', the
  // model's ends', the backward workspace's) its buffer from `take` (transformer_layout.cpp).
  using TakeFromArena = std::function<Buf(std::int64_t count, kernels::DType dtype)>;
  void place(Buf* field, const SavedTensor& t, const TakeFromArena& take) const;
  // The backward workspace (or the rank's first chunk's), then each slot, which points into it for
  // what train.recompute drops: the workspace comes first.
  void lay_out_workspace(const config::JobSpec& spec, const TakeFromArena& take);
  void lay_out_slot(const config::JobSpec& spec, const TakeFromArena& take, Slot& s);
  kernels::DType dtype_of(const SavedTensor& t) const;
  // Where each described tensor lives; nullptr where the struct has no such buffer.
  static Buf* layer_field(LayerActs& a, ArenaTensor id);
  static Buf* output_grad_field(LayerOutputGrads& g, ArenaTensor id);
  static Buf* slot_field(Slot& s, ArenaTensor id);
  static Buf* workspace_field(Workspace& w, ArenaTensor id);
  std::int64_t run_forward(Slot& s, const std::int32_t* tokens, const std::int32_t* targets, bool with_grad,
                           float grad_scale, Buf loss_sum);
  LayerWeights layer_weights(int local_layer, bool with_grads) const;
  // Return the branch's output to add to the residual stream: this rank's tokens of the summed
  // output projection (in ws_.proj_out).
  Buf attention_forward(const LayerWeights& w, LayerActs& a);
  // RoPE on x [N, H*D] (forward, or its inverse on a gradient), each query chunk at its positions.
  void rope(Buf x, int H, bool inverse) const;
  // The attention of this rank's q over the sequence's keys (q, k, v in sequence layout: a.q, a.k,
  // a.v, or under cp_comm a2a the workspace's) into a.att and a.lse.
  void attend(LayerActs& a, Buf q, Buf k, Buf v);
  // Its backward from ws_.d_att into d_q, d_k, d_v; under cp_comm allgather `kv_gathered` says
  // ws_.cp_k and cp_v hold this layer's sequence k and v (recompute() just gathered them).
  void attend_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a, bool kv_gathered);
  // The three ways of context parallelism (parallel/context_parallel.h), forward and backward.
  void attend_allgather(LayerActs& a);
  void attend_allgather_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a, bool kv_gathered);
  void attend_ring(LayerActs& a);
  void attend_ring_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a);
  void attend_a2a(LayerActs& a, Buf q, Buf k, Buf v);
  void attend_a2a_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a);
  // Rows [i * B * L ...) of a [N, cols] tensor: this rank's query chunk i (0 or 1).
  Buf chunk_rows(Buf x, int i, int cols) const;
  // The embedding (with GPT-2's positions) of s.tokens into `out`, and its backward from d_out.
  void embed(Buf out, Buf tokens, Buf positions);
  void embed_backward(Buf d_out, Buf tokens, Buf d_positions);
  Buf mlp_forward(const LayerWeights& w, LayerActs& a);
  // The MLP branch's backward from ws_.d_res into ws_.d_norm (the norm2 output's gradient, partial
  // sums over tp); `g` receives the output gradients, kept for weight_grad when `keep`.
  void mlp_backward(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g, bool keep);
  // The attention branch's backward from ws_.d_res into ws_.d_norm (the norm1 output's gradient,
  // partial sums over tp); `g` receives the output gradients, kept for weight_grad when `keep`.
  // `kv_gathered`: recompute() just ran this layer's attention (see attend_backward).
  void attention_backward(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g, bool keep,
                          bool kv_gathered);
  // split_weight_grad: the branches' weight gradients from the output gradients backward kept.
  void mlp_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g);
  void attention_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g);
  // The layer from its norm1 output (a.norm1, already computed from x_in) to x_out = its residual
  // output. With `next`, the final residual add is fused with the norm that reads x_out (the next
  // layer's norm1, or the final norm), announcing `next_unit` first; without, x_out is only added.
  void layer_forward(const LayerWeights& w, LayerActs& a, Buf x_in, Buf x_out, const NormInto* next,
                     int next_unit);
  // Rebuilds what train.recompute dropped; returns whether it ran the layer's attention again (full:
  // under context parallelism the sequence's k and v are then in the workspace).
  bool recompute(const LayerWeights& w, LayerActs& a, Buf x_in, Buf x_out_scratch);
  // Input gradients, and the weight gradients unless `keep` (split_weight_grad) takes their output
  // gradients for weight_grad. `kv_gathered`: recompute() just ran this layer's attention.
  void layer_backward(const LayerWeights& w, LayerActs& a, Buf x_in, const LayerOutputGrads* keep,
                      bool kv_gathered);
  void layer_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g);
  void norm_forward(Buf out, Buf mean, Buf rstd, Buf in, TensorAt w, TensorAt b, Buf amax = {});
  // x_out = a + b, then the norm `into` of x_out, in one fused op.
  void add_norm_forward(Buf x_out, Buf a, Buf b, const NormInto& into);
  NormInto norm1_of(int slot_layer, Slot& s) const;  // layer `slot_layer`'s norm1 in slot s
  // A layer's kept amax of a linear layer's input, of an output gradient (null unless FP8 current
  // scaling; layer_description.h).
  static Buf input_amax(const LayerActs& a, Fp8InputAmax which) { return runtime::advance(a.fp8_amax, which); }
  static Buf output_grad_amax(const LayerOutputGrads& g, Fp8OutputGradAmax which) {
    return runtime::advance(g.fp8_amax, which);
  }
  // d_in += d(norm)/d(in) applied to d_out; parameter grads accumulate.
  void norm_backward(Buf d_in, Buf d_out, Buf in, Buf mean, Buf rstd, TensorAt w, TensorAt b);
  std::string name(const char* gpt2_name, const char* llama_name) const;  // of a model end's tensor
  // The GEMMs of attention's and the MLP's linear layers (in FP8 under train.precision fp8).
  // `which` of layer w's (its amaxes under delayed scaling), and of its experts (MoE); `shared`: the
  // FP8 codes of an input it reads with other linear layers (model::SharedInput).
  BlockLinears linears(const LayerWeights& w, Fp8Linear which, SharedInput* shared = nullptr) const;
  ExpertLinears expert_linears(const LayerWeights& w) const;
  // index: model/fp8_history.h; tp: the group a current amax is reduced over (nullptr: none).
  BlockLinears linears_at(int layer, int index, parallel::TensorParallel* tp, SharedInput* shared) const;
  int tp_rank() const { return tp_ == nullptr ? 0 : tp_->rank(); }
  // The residual stream around the tensor-parallel layers (parallel::TensorParallel, which also says
  // how under sequence parallelism); with tp = 1, `full` and `mine` themselves.
  Buf reduce_tokens(Buf full);
  Buf gather_tokens(Buf mine, Buf full);
  Buf row_parallel_bias(Buf bias) const { return tp_ == nullptr ? bias : tp_->row_parallel_bias(bias); }
  // This context-parallel rank's chunks of a [B, T*cp] batch, in `mine`.
  const std::int32_t* take_chunks(const std::int32_t* batch, std::vector<std::int32_t>& mine) const;
  // The token ids as rows of this rank's vocabulary shard (kernels::kRowElsewhere if another's).
  const std::int32_t* shard_token_ids(const std::int32_t* tokens);
  void cross_entropy(Slot& s, bool with_grad, float grad_scale);

  ParamStore& params_;
  const kernels::Ops& ops_;
  ModelDims dims_;
  config::Recompute recompute_;
  const Transformer* workspace_from_;
  bool split_weight_grad_;
  parallel::TensorParallel* tp_;
  bool experts_over_tp_;  // config::ParallelSpec::experts_over_tp
  bool sequence_parallel_ = false;
  parallel::ContextParallel* cp_;
  std::vector<QueryChunk> query_chunks_;
  std::optional<MoeBlock> moe_;                       // mixtral
  std::vector<std::int32_t> cp_tokens_, cp_targets_;  // host: this cp rank's chunks of the batch
  std::vector<std::int32_t> shard_ids_;  // host: shard_token_ids' result
  kernels::DType act_;          // activations and their gradients: BF16 under mixed precision, else F32
  config::Precision precision_;
  std::vector<int> layer_ids_;    // global index of each layer of the chunk
  std::vector<LayerTensors> layer_tensors_;  // each layer's of the chunk
  EndTensors ends_;
  std::vector<int> layer_units_;  // its ParamStore unit
  int layer_unit(int local_layer) const { return layer_units_[static_cast<size_t>(local_layer)]; }
  std::vector<int> expert_units_;  // the ParamStore unit of each layer's experts when apart, else -1
  int expert_unit(int local_layer) const { return expert_units_[static_cast<size_t>(local_layer)]; }
  bool first_ = true, last_ = true;
  UnitHooks* hooks_ = nullptr;
  const Fp8History* fp8_history_ = nullptr;
  // The FP8 codes of this chunk's weights, each linear layer's of the shape its GEMMs read, kept for
  // the pass (model::keeps_fp8_weight_copies; allocated with the chunk). A cache the GEMMs fill.
  mutable std::optional<Fp8WeightCopies> fp8_weight_copies_;
  void keep_fp8_weight_copies();
  void announce_forward(int unit) { if (hooks_ != nullptr && unit >= 0) hooks_->before_forward(unit); }
  void announce_backward(int unit) { if (hooks_ != nullptr && unit >= 0) hooks_->before_backward(unit); }
  void announce_done(int unit) { if (hooks_ != nullptr && unit >= 0) hooks_->after_backward(unit); }
  runtime::Arena arena_;
  std::int64_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  Workspace ws_;
};

}  // namespace ptrain::model
