// One description of the model's work on one rank, per microbatch: a transformer layer's ops in
// execution order (GEMMs with their shapes, attention with its shape, the memory-bound ops with the
// bytes they move, the collectives with their group and bytes) and the tensors each op keeps for
// backward; the model's two ends (embedding, LM head and loss) alike; and the backward workspace.
// Pure data from the job spec. The engine lays out its activation arena by walking these tensors
// (model/transformer_layout.cpp binds each ArenaTensor to its buffer), `validate` counts memory
// from them (plan/memory.h), and the traffic model reads the layer's collectives (plan/traffic.h).
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
// Recompute modes (what a layer keeps of its ops' saved tensors):
//   none      - all of them;
//   selective - norms and the activation function are recomputed: the tensors marked
//               `recomputable` (norm outputs, SwiGLU/GELU output) are dropped; inputs and
//               statistics stay;
//   full      - a layer keeps only its input (sbh, /t under SP) and recomputes its forward in
//               backward; the recomputed layer's full set is transient (in the backward workspace,
//               once per rank, not per microbatch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::model {

// Every tensor of the activation arena, by what it is (the engine binds each to its buffer).
enum class ArenaTensor {
  // A layer's, per microbatch.
  LayerInput, Norm1Mean, Norm1Rstd, Norm1Output, Q, K, V, AttentionOutput, AttentionLse,
  AttentionHeadsOutput, MidResidual,
  Norm2Mean, Norm2Rstd, Norm2Output, MlpUp, MlpGate, MlpActivation,
  MoeProbs, MoeChoice, MoeWeight, MoeSlot, MoeCounts, MoeExpertInput, MoeGate, MoeUp, MoeActivation,
  MoeExpertOutput,
  // Output gradients of a layer's linear layers (backward temporaries; per microbatch under zb-h1).
  DQ, DK, DV, DAttentionOutput, DMlpOutput, DMlpUp, DMlpGate, MoeDLogits, MoeDGate, MoeDUp,
  MoeDExpertOutput,
  // train.fp8.scaling current: the amaxes of a layer's linear layers' inputs and output gradients
  // (Fp8InputAmax, Fp8OutputGradAmax below), each taken once.
  Fp8InputAmaxes, Fp8OutputGradAmaxes,
  // The model's ends, per microbatch.
  TokenIds, FinalNormInput, FinalNormMean, FinalNormRstd, FinalNormOutput, Logits, Targets, TokenLosses,
  LossShardStats,
  // The backward workspace's own temporaries.
  ProjectionOutput, DResidual, DNorm, SpGatheredInput, SpGatheredGradient, CpKeys, CpValues,
  CpDKeys, CpDValues, CpStaging, CpRingKv, CpRingDKv, CpRingPart, CpRingPartLse, CpRingPartDKv, CpA2aQ, CpA2aK,
  CpA2aV, CpA2aDOutput, CpA2aSend, CpA2aRecv, DAttention, DMlpActivation, MoeDWeight, MoeDActivation, MoeDExpertInput,
  MoeExchange, MoeCpOwnSlot, MoeCpOwnWeight, MoeCpLogits, MoeCpLogitsStaging, MoeCpDWeight,
  MoeCpDLogits,
  // train.precision fp8: one linear layer's operands cast to FP8 codes, their amaxes and inverse scales.
  Fp8Input, Fp8Weight, Fp8OutputGrad, Fp8Amax, Fp8OutputGradTransposed, Fp8InvScale,
};

// Activation: the training dtype (bf16 or fp32). Fp8E4M3, Fp8E5M2: FP8 codes, a byte each.
enum class Element { Activation, F32, I32, Fp8E4M3, Fp8E5M2 };

struct SavedTensor {
  ArenaTensor id = ArenaTensor::LayerInput;
  const char* name = "";      // e.g. "attn_norm.output"
  std::int64_t elements = 0;  // per microbatch on one rank
  Element element = Element::Activation;
  int bytes_per_element = 0;
  bool recomputable = false;  // dropped under selective recompute (rebuilt in backward)
  double bytes() const { return static_cast<double>(elements) * bytes_per_element; }
};

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv };
enum class Axis { Tp, Cp, Ep };

// out[m, n] = in[m, k] x W^T, `count` times (one per local expert); backward runs the input
// gradient [m, n] x [n, k] and the weight gradient [n, m] x [m, k].
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0, count = 1;
  double forward_flops() const { return 2.0 * static_cast<double>(m) * n * k * count; }
};

// Causal flash attention of this rank's queries over the sequence's keys: blocks of `rows` query
// positions per sequence starting at position `first` (one block; two under context parallelism).
struct AttentionShape {
  struct QueryBlock {
    std::int64_t rows = 0, first = 0;
  };
  std::int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<QueryBlock> blocks;
  // QK^T and AV over each query's visible keys (the diagonal included), forward.
  double forward_flops() const;
};

// A collective over one axis of the rank grid: `forward` runs in the op's forward, `backward` in its
// backward (the transposes, and what backward gathers again), each once with a buffer of `bytes`
// (the full, gathered size for all-gather / reduce-scatter; the send buffer for all-to-all).
struct CollectiveStep {
  Axis axis = Axis::Tp;
  int ranks = 1;
  double bytes = 0;
  std::vector<CollectiveKind> forward, backward;
};

// Norm and Activation are Llama's (RMSNorm, SwiGLU); LayerNorm and Gelu GPT-2's, which cost more
// per byte (mean and variance, the tanh formula) and are timed from their own profile tables.
enum class OpKind { Norm, LayerNorm, Gemm, Rope, Attention, Activation, Gelu, Routing, Collective, Embedding, Loss };

struct Op {
  const char* name = "";  // e.g. "attn.q_proj"
  OpKind kind = OpKind::Gemm;
  GemmShape gemm;                 // Gemm
  AttentionShape attention;       // Attention
  CollectiveStep collective;      // Collective
  double memory_bytes = 0;        // memory-bound ops: bytes read and written in forward
  std::vector<SavedTensor> saves;  // what the op keeps for backward
  // Gemm: a linear layer whose GEMMs run in FP8 under train.precision fp8 (model/block_linears.h):
  // attention's and the MLP's, the experts'; not the router's nor the LM head's.
  bool fp8 = false;
  // An FP8 linear layer that reads the input of the one before it (k and v after q, up after gate, w3
  // after w1): it reads that layer's FP8 codes of the input and casts none (model::SharedInput).
  bool fp8_input_shared = false;
  // Under current scaling, the amaxes its casts need no pass of their own for (model::KnownAmaxes,
  // kFp8InputAmaxes, kFp8OutputGradAmaxes): the forward's input's (written by the norm or activation
  // before it); the weight gradient's input's and output gradient's (kept from the forward and the
  // input gradient's casts); the output gradient's (written by the activation's backward).
  bool fp8_input_amax_written = false, fp8_amaxes_kept = false, fp8_output_grad_amax_written = false;
  // Gemm: the distinct weights its gemm.count calls read (an MoE layer's: the rank's experts, E / ep).
  std::int64_t weights = 1;
};

// The ops of one transformer layer (gpt2: LayerNorm + GELU MLP; llama: RMSNorm + SwiGLU; mixtral:
// RMSNorm + routed SwiGLU experts with capacity factor), in execution order; the residual add that
// ends the layer is fused with the next norm.
std::vector<Op> layer_ops(const config::JobSpec& spec);
// Virtual stage 0's embedding and the last virtual stage's final norm, LM head and loss.
std::vector<Op> embedding_ops(const config::JobSpec& spec);
std::vector<Op> head_ops(const config::JobSpec& spec);

// All three, built once where many stages are counted (validate, plan).
struct ModelOps {
  std::vector<Op> layer, embedding, head;
};
ModelOps model_ops(const config::JobSpec& spec);

// The tensors a list of ops keeps under `mode` (recompute applies to transformer layers).
std::vector<SavedTensor> saved_tensors(const std::vector<Op>& ops, config::Recompute mode);
// One layer's under `mode`; the embedding's (the token ids: its backward scatters by them; its
// output is the first layer's input); the head's (final norm, vocab-parallel logits overwritten by
// their gradient in the chunked cross-entropy, targets, fp32 loss per token, every shard's stats).
std::vector<SavedTensor> layer_saved_activations(const config::JobSpec& spec, config::Recompute mode);
std::vector<SavedTensor> embedding_saved_activations(const config::JobSpec& spec);
std::vector<SavedTensor> head_saved_activations(const config::JobSpec& spec);

// The gradient at each linear layer's output of one layer (q, k, v, the attention and MLP output
// projections, the MLP up and gate projections; MoE layers: the router's and the experts'). Backward
// computes them into the workspace; when the schedule splits weight gradients (zb-h1) a layer keeps
// them until its W (the inputs are the layer's activations, rebuilt in W where the recompute mode
// dropped them). `residual_copies`: with the two output projections' (kept apart from the
// residual-stream gradient they equal).
std::vector<SavedTensor> layer_output_grads(const config::JobSpec& spec, bool residual_copies);
// What zb-h1 keeps per layer and microbatch: layer_output_grads(spec, true).
std::vector<SavedTensor> layer_weight_grad_inputs(const config::JobSpec& spec);

// What backward uses once per rank, shared by every layer and microbatch: the tensors recompute
// rebuilds (full: one layer's complete set but its input; selective: the recomputable ones), the
// layer's output gradients, and the backward temporaries (the residual-stream gradient, projection
// outputs, the attention and MLP input gradients; under sequence parallelism the gathered input and
// gradient; under context parallelism the whole sequence's k, v, their gradients and the
// collectives' staging; the MoE block's; under fp8 the FP8 operands of one linear layer).
std::vector<SavedTensor> recomputed_tensors(const config::JobSpec& spec);
std::vector<SavedTensor> backward_workspace(const config::JobSpec& spec);

// cp_comm ring: the bytes of one hop's message, a rank's k and v of one layer and microbatch (their
// gradients travel in messages of the same size).
std::size_t ring_message_bytes(const config::JobSpec& spec);
// FP8's linear layers in a layer (model/fp8_history.h): attention's q, k, v, o and the MLP's up,
// gate, down (7; GPT-2's has no gate but keeps its place), or under MoE each expert's three (4 + 3E).
int fp8_linears_per_layer(const config::ModelSpec& model);
// train.fp8.scaling delayed: the device's amax scales and step records of every layer's casts
// (model/fp8_history.h: layers x fp8_linears_per_layer x 3 tensors, twice, F32); 0 otherwise.
std::int64_t fp8_history_device_bytes(const config::JobSpec& spec);
// train.precision fp8 below ZeRO-3: the trainer keeps each FP8 linear layer's weight codes for the
// pass, as stored and transposed (model/fp8_weight_copies.h): 2 bytes a weight element.
bool keeps_fp8_weight_copies(const config::JobSpec& spec);

// train.fp8.scaling current: the amaxes a layer keeps (F32, device memory; ops.h `amax`), each
// taken once, beside the tensor, and read by every cast of it: of its linear layers' inputs
// (Fp8InputAmaxes: norm1's output, q/k/v's; the attention output, o's; norm2's output, the MLP's
// first; the activation, the MLP's last; the MoE block's experts take their own) and of their output
// gradients (Fp8OutputGradAmaxes: d_gate's and d_up's written by the dense MLP's activation
// backward, the others taken once, for the input and the weight gradient's casts both).
enum Fp8InputAmax : int { kNorm1Amax, kAttentionAmax, kNorm2Amax, kActivationAmax, kFp8InputAmaxes };
enum Fp8OutputGradAmax : int {
  kDQAmax, kDKAmax, kDVAmax, kDAttentionAmax, kDMlpAmax, kDGateAmax, kDUpAmax, kFp8OutputGradAmaxes
};
static_assert(kDUpAmax == kDGateAmax + 1, "swiglu_backward writes d_gate's amax, then d_up's");

double total_bytes(const std::vector<SavedTensor>& tensors);
// Forward FLOPs of a list of ops: its GEMMs and attention.
double forward_flops(const std::vector<Op>& ops);

}  // namespace ptrain::model
