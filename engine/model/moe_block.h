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
//  - over ranks other than the tp group (parallel.experts_over_tp false: ep != tp, or an order whose
//    ep groups are not the tp groups; parallel/expert_parallel.h): this rank holds E/ep experts; its
//    tokens' slots for every expert are exchanged with the ep group (one all-to-all), so its expert
//    buffers hold, in source-rank order, each rank's R slots per local expert: E*R rows either way.
//    Expert block q of the received buffer (rows [q*R, (q+1)*R)) is local expert q % (E/ep). The
//    outputs go back the same way before they are combined; backward exchanges the gradients alike.
//  - over the tensor-parallel group (parallel.experts_over_tp: ep = tp on the tp groups, under
//    sequence parallelism; Megatron's all-gather
//    dispatch): the block takes the tp group's whole tokens (all-gathered, as every column-parallel
//    layer does), every rank routes all of them alike and runs its E/tp experts on their slots, and
//    its output is a partial sum over tp, reduce-scattered like a row-parallel layer's. Backward sums
//    the combine weights' gradients over tp (each pair's expert is on one rank), and each rank
//    takes the router's gradients for its own tokens only, so the sums over tp count them once.
// With tp > 1 and the experts not split over the tp group (ep = 1, or ep over other ranks), every
// tp rank routes the group's gathered tokens alike but dispatches, runs its experts on, and
// combines only its own tokens (the router's rows; the others' rows of its output are zero, added
// by the tp sum like a row-parallel layer's), so each expert gradient counts a token once when the
// expert-dp group, which includes the tp ranks, sums them.
//
// Context parallelism (cp > 1): a rank holds two chunks of each sequence, but capacity is per
// sequence, earliest positions first. The router's logits are all-gathered over the cp group into
// sequence order (E floats a token) and every cp rank routes the whole sequences alike, so each
// keeps the routing tensors of the whole sequences (probs, choice, weight, slot, counts) and takes
// its own tokens' slots and weights to dispatch and combine: the experts' static slot buffers are
// the same as on one rank (the slots of the other ranks' tokens stay zero). Backward runs the
// router's backward over the whole sequences with the other ranks' weight gradients at zero (the
// load-balancing loss's gradient is per token, from the whole sequence's counts) and takes its own
// tokens' logit gradients.
//
// Load balancing (model.moe.aux_loss_coef): HF Mixtral's auxiliary loss formula per sequence,
// E * sum_e (tokens choosing e / T) * (mean router probability of e), averaged over the global
// batch's sequences and added to the training objective with that coefficient in every MoE layer,
// so the layers' losses add up as in Megatron (HF pools all layers into one loss, about L times
// weaker); its gradient only: the reported loss is the language-model loss.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/block_linears.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/expert_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "kernels/ops.h"

namespace ptrain::model {

// The GEMMs of expert `expert`'s gate (w1), up (w3) or down (w2) projection: model::BlockLinears,
// in FP8 under train.precision fp8 (with the expert's amax histories under delayed scaling; w1 and
// w3 share their input's codes through a SharedInput, nullptr for w2).
using ExpertLinears = std::function<BlockLinears(int expert, Fp8Linear which, SharedInput* shared)>;

struct ExpertWeights {
  kernels::Buf w1, w3, w2;        // gate [F, C], up [F, C], down [C, F]
  kernels::Buf g_w1, g_w3, g_w2;  // their gradients (null in forward)
};
struct MoeWeights {
  kernels::Buf router, g_router;  // [E, C]
  std::vector<ExpertWeights> experts;  // this rank's E/ep
};

// What one MoE layer keeps per microbatch (sized by model/layer_description.h). Under context
// parallelism the routing tensors are the whole sequences' (N * cp rows, sequence order).
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
  kernels::Buf exchange;     // ep > 1: [rows, C] what one all-to-all sends (or receives)
  // cp > 1: this rank's tokens' slots [N, k] I32 and weights [N, k] F32, the router's logits of them
  // [N, E] F32 and the all-gather's staging [cp * N, E] F32, the whole sequences' weight gradients
  // [N * cp, k] F32 and logit gradients [N * cp, E].
  kernels::Buf own_slot, own_weight, logits, logits_staging, sequence_d_weight, sequence_d_logits;
};

class MoeBlock {
 public:
  // N = micro_batch * T tokens of whole sequences of length T (tp > 1: the tp group's). With ep > 1,
  // `ep` (tp = 1) or `tp` (ep = tp) is the group the experts are split over, of parallel.ep ranks.
  MoeBlock(const config::JobSpec& spec, const kernels::Ops& ops, int T, parallel::ExpertParallel* ep,
           parallel::TensorParallel* tp, parallel::ContextParallel* cp);

  int experts() const { return E_; }
  int local_experts() const { return E_ / split_; }
  std::int64_t expert_ffn() const { return F_; }  // an expert's hidden size (experts are not split over tp)
  int first_local_expert() const { return split_rank_ * local_experts(); }
  int top_k() const { return k_; }
  // Slots in the experts' buffers: every expert's under the all-to-all, else the local experts'.
  std::int64_t rows() const { return static_cast<std::int64_t>(ep_ != nullptr ? E_ : local_experts()) * R_; }

  // out[N, C] = the block applied to in[N, C] (both of the activation dtype).
  // The experts' GEMMs through `linears` (the router's stay in the activation dtype).
  void forward(const MoeWeights& w, MoeActs& a, kernels::Buf in, kernels::Buf out, const MoeWorkspace& ws,
               const ExpertLinears& linears) const;
  // a.act from a.gate and a.up (selective recompute).
  void recompute_activation(MoeActs& a) const;
  // d_in[N, C] = dLoss/d(in) from d_out (overwrite), through the experts and the router (with the
  // load-balancing loss). The weight gradients accumulate unless `keep` takes the output gradients
  // for weight_grad(); otherwise they go to `outputs`.
  void backward(const MoeWeights& w, const MoeActs& a, kernels::Buf in, kernels::Buf d_out, kernels::Buf d_in,
                const MoeWorkspace& ws, const MoeGrads& outputs, bool keep, const ExpertLinears& linears) const;
  void weight_grad(const MoeWeights& w, const MoeActs& a, kernels::Buf in, const MoeGrads& g,
                   const ExpertLinears& linears) const;

 private:
  kernels::Buf expert_rows(kernels::Buf b, int e, int cols) const;
  // The global index of the expert of block e (rows [e*R, (e+1)*R) of the experts' buffers).
  int block_expert(int e) const { return first_local_expert() + e % local_experts(); }
  // Expert-parallel: `from` (in this rank's layout) to `to` (in the experts' owners'), or back.
  void exchange(kernels::Buf from, kernels::Buf to) const;
  // The rows of an [N, cols] tensor whose router gradients this rank takes (its own tokens under tp).
  kernels::Buf router_rows(kernels::Buf b, int cols) const;
  // tp > 1 with the experts not split over it: this rank dispatches and combines its own tokens
  // only (the router's rows), and the tp sum of the block's output adds the others'.
  bool own_tokens_only() const { return tp_ != nullptr && !experts_over_tp_; }
  kernels::Buf dispatched_rows(kernels::Buf b, int cols) const;  // of an [N, cols] tensor
  int dispatched_tokens() const;
  // This rank's tokens' slots and weights: the routing's own (cp = 1), else taken from the whole
  // sequences' into the workspace.
  std::pair<kernels::Buf, kernels::Buf> own_routing(const MoeActs& a, const MoeWorkspace& ws) const;

  const kernels::Ops& ops_;
  parallel::ExpertParallel* ep_;    // the all-to-all (ep > 1, tp = 1)
  parallel::TensorParallel* tp_;    // tp > 1: the group whose tokens the block takes (all-gathered)
  bool experts_over_tp_;            // config::experts_over_tp: the experts split over the tp group
  parallel::ContextParallel* cp_;   // cp > 1: the group whose chunks make the sequences routed
  int split_ = 1, split_rank_ = 0;  // the ranks the experts are split over, and this one's index
  int router_first_ = 0, router_tokens_ = 0;
  int B_, T_, N_, C_, F_, E_, k_, capacity_;
  int sequence_T_;  // positions of a whole sequence: T, or under cp the cp group's
  std::int64_t R_;
  float aux_scale_;  // aux_loss_coef / sequences of the global batch
};

}  // namespace ptrain::model
