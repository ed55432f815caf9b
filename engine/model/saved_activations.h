// The activations a forward pass keeps for its backward, per microbatch on one rank: the contract
// the engine allocates its activation arena from, and what `validate` counts. One list per layer
// kind, tensor by tensor, so the estimate and the run cannot drift.
//
// Symbols (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models"): s = seq_len / cp (context parallel splits the sequence), b = micro_batch, h = hidden,
// a = heads, g = kv_heads, d = h/a, f = ffn_hidden, t = tp, V = padded vocab. Local heads
// a/t and max(g/t, 1) (kv heads are replicated when g < t). Under sequence parallelism the tensors
// outside attention and MLP (norm inputs/outputs, residuals) are sharded along s, i.e. divided by
// t; norm outputs are kept sharded and all-gathered again in backward (Megatron). No dropout.
// Attention is flash attention: no s x s matrix, only its output and the fp32 logsumexp (b*a*s).
// Activations use the training dtype (2 bytes bf16, 4 fp32); norm statistics are fp32.
//
// Recompute modes:
//   none      - everything below;
//   selective - norms and the activation function are recomputed: their outputs are dropped
//               (norm outputs, SwiGLU/GELU output); inputs and statistics stay;
//   full      - a layer keeps only its input (sbh, /t under SP) and recomputes its forward in
//               backward; the recomputed layer's full set is transient (counted once per stage
//               by the memory model, not per microbatch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::model {

struct SavedTensor {
  std::string name;           // e.g. "attn_norm.input"
  std::int64_t elements = 0;  // per microbatch on one rank
  int bytes_per_element = 0;
  double bytes() const { return static_cast<double>(elements) * bytes_per_element; }
};

// One transformer layer (gpt2: LayerNorm + GELU MLP; llama: RMSNorm + SwiGLU; mixtral: RMSNorm +
// routed SwiGLU experts with capacity factor) under `mode`.
std::vector<SavedTensor> layer_saved_activations(const config::JobSpec& spec, config::Recompute mode);
// Virtual stage 0: the token ids (the embedding backward scatters by them). The embedding output is
// the first layer's input and is counted there.
std::vector<SavedTensor> embedding_saved_activations(const config::JobSpec& spec);
// The last virtual stage: final norm, LM head input, vocab-parallel logits (s*b*V/t, overwritten by
// their gradient in the chunked cross-entropy), the targets and the fp32 loss per token. Independent of the
// recompute mode (recompute applies to transformer layers).
std::vector<SavedTensor> head_saved_activations(const config::JobSpec& spec);

// What a layer's backward keeps until its W when the schedule splits weight gradients (zb-h1): the
// gradient at each linear layer's output (q, k, v, the attention and MLP output projections, the MLP
// up and gate projections; MoE layers: the router's and the dispatched experts'). The inputs are
// the layer's activations, rebuilt in W where the recompute mode dropped them.
std::vector<SavedTensor> layer_weight_grad_inputs(const config::JobSpec& spec);

// What backward uses once per rank, shared by every layer and microbatch: the tensors recompute
// rebuilds (full: one layer's complete set; selective: the norm outputs and the MLP activation)
// and the backward temporaries (the residual-stream gradient, projection outputs, the attention
// and MLP input gradients; under context parallelism the whole sequence's k, v, their gradients and
// the collectives' staging).
std::vector<SavedTensor> backward_workspace(const config::JobSpec& spec);

// The tokens of one sequence an expert takes (model/moe_block.h): min(seq_len, ceil(capacity_factor *
// top_k * seq_len / experts)); 0 for dense models.
int expert_capacity(const config::JobSpec& spec);
// Token slots the rank's E/ep local experts hold per microbatch of one MoE layer: each expert takes
// expert_capacity tokens of each sequence its ep group routes, micro_batch * ep sequences, of which
// a rank holds 1/(cp * t) under context (and sequence) parallelism; 0 for dense models. As the
// engine runs it: E * micro_batch * capacity with ep over data-parallel ranks (or ep = 1), and the
// local experts' E/t * micro_batch * capacity with the experts split over the tp group (ep = t);
// the rest is the model `validate` and `plan` use for layouts the engine does not run yet.
std::int64_t expert_token_slots(const config::JobSpec& spec);

double total_bytes(const std::vector<SavedTensor>& tensors);

}  // namespace ptrain::model
