// Mixtral's sparse MoE block (model.arch: mixtral) on one rank's tokens: a router (a linear layer to
// E logits, softmax, each token's top_k experts, their probabilities renormalised) and E SwiGLU
// experts (w2(silu(w1 x) * w3 x)); a token's output is its experts' outputs weighted.
//
// Capacity (model.moe.capacity_factor): an expert takes at most
//   capacity = min(seq_len, ceil(capacity_factor * top_k * seq_len / experts))
// tokens of each sequence, the earliest positions first; a token an expert drops gets nothing from
// that expert (the residual carries it). Per sequence, not per rank or per microbatch, so every
// layout routes and drops alike and reproduces the single-rank run. The experts' buffers are
// static: expert e's slots are rows [e*R, (e+1)*R) with R = micro_batch * capacity, unused slots
// zero (they cost compute, not correctness: zero rows give zero outputs and gradients).
//
// Expert parallelism, two ways:
//  - over data-parallel ranks (tp = 1; parallel/expert_parallel.h): this rank holds E/ep experts; its
//    tokens' slots for every expert are exchanged with the ep group (one all-to-all), so its expert
//    buffers hold, in source-rank order, each rank's R slots per local expert: E*R rows either way.
//    Expert block q of the received buffer (rows [q*R, (q+1)*R)) is local expert q % (E/ep). The
//    outputs go back the same way before they are combined; backward exchanges the gradients alike.
//  - over the tensor-parallel group (ep = tp, under sequence parallelism; Megatron's all-gather
//    dispatch): the block takes the tp group's whole tokens (all-gathered, as every column-parallel
//    layer does), every rank routes all of them alike and runs its E/tp experts on their slots, and
//    its output is a partial sum over tp, reduce-scattered like a row-parallel layer's. Backward sums
//    the combine weights' gradients over tp (each pair's expert is on one rank), and each rank
//    takes the router's gradients for its own tokens only, so the sums over tp count them once.
//
// Load balancing (model.moe.aux_loss_coef): HF Mixtral's auxiliary loss per sequence,
// E * sum_e (tokens choosing e / T) * (mean router probability of e), averaged over the global
// batch's sequences and added to the training objective with that coefficient (its gradient only;
// the reported loss is the language-model loss).
#pragma once

#include <vector>

#include "engine/config/job_spec.h"
#include "engine/parallel/expert_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "kernels/ops.h"

namespace ptrain::model {

struct ExpertWeights {
  kernels::Buf w1, w3, w2;        // gate [F, C], up [F, C], down [C, F]
  kernels::Buf g_w1, g_w3, g_w2;  // their gradients (null in forward)
};
struct MoeWeights {
  kernels::Buf router, g_router;  // [E, C]
  std::vector<ExpertWeights> experts;  // this rank's E/ep
};

// What one MoE layer keeps per microbatch (sized by model/layer_description.h).
struct MoeActs {
  kernels::Buf probs;                 // [N, E] F32 router probabilities (the logits before routing)
  kernels::Buf choice, weight, slot;  // [N, k]: I32 experts, F32 renormalised weights, I32 slots
  kernels::Buf counts;                // [B, E] F32 tokens of each sequence choosing each expert
  kernels::Buf expert_in;             // [rows, C] the tokens the local experts take (received)
  kernels::Buf gate, up, act;         // [rows, F] w1 and w3 outputs, SwiGLU output
  kernels::Buf expert_out;            // [rows, C] the experts' outputs for this rank's tokens (returned)
};
// The gradients at the block's linear layers' outputs: what weight_grad() needs.
struct MoeGrads {
  kernels::Buf d_logits;      // [N, E] in the activation dtype
  kernels::Buf d_gate, d_up;  // [rows, F]
  kernels::Buf d_expert_out;  // [rows, C] at the local experts' outputs (received)
};
// Backward temporaries, shared by every layer.
struct MoeWorkspace {
  kernels::Buf d_weight;     // [N, k] F32
  kernels::Buf d_act;        // [rows, F]
  kernels::Buf d_expert_in;  // [rows, C]
  kernels::Buf d_partial;    // [R, C] one expert's w3 input gradient before it is added
  kernels::Buf exchange;     // ep > 1: [rows, C] what one all-to-all sends (or receives)
};

class MoeBlock {
 public:
  // N = micro_batch * T tokens of whole sequences of length T (tp > 1: the tp group's). With ep > 1,
  // `ep` (tp = 1) or `tp` (ep = tp) is the group the experts are split over, of parallel.ep ranks.
  MoeBlock(const config::JobSpec& spec, const kernels::Ops& ops, int T, parallel::ExpertParallel* ep,
           parallel::TensorParallel* tp);

  int experts() const { return E_; }
  int local_experts() const { return E_ / split_; }
  int first_local_expert() const { return split_rank_ * local_experts(); }
  int top_k() const { return k_; }
  // Slots in the experts' buffers: every expert's under the all-to-all, else the local experts'.
  std::int64_t rows() const { return static_cast<std::int64_t>(ep_ != nullptr ? E_ : local_experts()) * R_; }

  // out[N, C] = the block applied to in[N, C] (both of the activation dtype).
  void forward(const MoeWeights& w, MoeActs& a, kernels::Buf in, kernels::Buf out,
               const MoeWorkspace& ws) const;
  // a.act from a.gate and a.up (selective recompute).
  void recompute_activation(MoeActs& a) const;
  // d_in[N, C] = dLoss/d(in) from d_out (overwrite), through the experts and the router (with the
  // load-balancing loss); d_scratch [N, C] is clobbered. The weight gradients accumulate unless
  // `keep` takes the output gradients for weight_grad(); otherwise they go to `outputs`.
  void backward(const MoeWeights& w, const MoeActs& a, kernels::Buf in, kernels::Buf d_out, kernels::Buf d_in,
                kernels::Buf d_scratch, const MoeWorkspace& ws, const MoeGrads& outputs, bool keep) const;
  void weight_grad(const MoeWeights& w, const MoeActs& a, kernels::Buf in, const MoeGrads& g) const;

 private:
  kernels::Buf expert_rows(kernels::Buf b, int e, int cols) const;
  // Expert-parallel: `from` (in this rank's layout) to `to` (in the experts' owners'), or back.
  void exchange(kernels::Buf from, kernels::Buf to) const;
  // The rows of an [N, cols] tensor whose router gradients this rank takes (its own tokens under tp).
  kernels::Buf router_rows(kernels::Buf b, int cols) const;

  const kernels::Ops& ops_;
  parallel::ExpertParallel* ep_;    // the all-to-all (ep > 1, tp = 1)
  parallel::TensorParallel* tp_;    // the experts split over the tp group (ep = tp > 1)
  int split_ = 1, split_rank_ = 0;  // the ranks the experts are split over, and this one's index
  int router_first_ = 0, router_tokens_ = 0;
  int B_, T_, N_, C_, F_, E_, k_, capacity_;
  std::int64_t R_;
  float aux_scale_;  // aux_loss_coef / sequences of the global batch
};

}  // namespace ptrain::model
