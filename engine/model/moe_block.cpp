#include "engine/model/moe_block.h"

#include <stdexcept>
#include <string>

#include "engine/config/moe_capacity.h"
#include "engine/runtime/owned_buffer.h"

namespace ptrain::model {

using kernels::Buf;

MoeBlock::MoeBlock(const config::JobSpec& spec, const kernels::Ops& ops, int T, parallel::ExpertParallel* ep,
                   parallel::TensorParallel* tp, parallel::ContextParallel* cp)
    : ops_(ops),
      ep_(spec.parallel.ep > 1 && !spec.parallel.experts_over_tp ? ep : nullptr),
      tp_(spec.parallel.tp > 1 ? tp : nullptr),
      experts_over_tp_(spec.parallel.experts_over_tp),
      cp_(spec.parallel.cp > 1 ? cp : nullptr),
      B_(spec.train.micro_batch),
      T_(T),
      N_(B_ * T),
      C_(spec.model.hidden),
      F_(spec.model.ffn_hidden),
      E_(spec.model.moe->experts),
      k_(spec.model.moe->top_k),
      capacity_(config::expert_capacity(spec)),
      sequence_T_(spec.parallel.cp > 1 ? spec.model.seq_len : T),
      R_(static_cast<std::int64_t>(B_) * capacity_),
      aux_scale_(static_cast<float>(spec.model.moe->aux_loss_coef / spec.train.global_batch)) {
  const config::ParallelSpec& p = spec.parallel;
  if (ep_ != nullptr && ep->size() != p.ep)
    throw std::invalid_argument("MoeBlock: parallel.ep = " + std::to_string(p.ep) +
                                " needs an expert-parallel group of that size");
  if (p.ep > 1 && !experts_over_tp_ && ep == nullptr)
    throw std::invalid_argument("MoeBlock: parallel.ep = " + std::to_string(p.ep) + " needs an expert-parallel group");
  if (p.tp > 1 && (tp == nullptr || tp->size() != p.tp))
    throw std::invalid_argument("MoeBlock: parallel.tp = " + std::to_string(p.tp) +
                                " needs a tensor-parallel group of that size");
  if (p.cp > 1 && (cp == nullptr || cp->size() != p.cp || cp->seq_len() != spec.model.seq_len))
    throw std::invalid_argument("MoeBlock: parallel.cp = " + std::to_string(p.cp) +
                                " needs a context-parallel group of that size");
  if (ep_ != nullptr) split_ = ep_->size(), split_rank_ = ep_->rank();
  if (experts_over_tp_) split_ = tp_->size(), split_rank_ = tp_->rank();
  router_tokens_ = tp_ != nullptr ? N_ / tp_->size() : N_;
  router_first_ = tp_ != nullptr ? tp_->rank() * router_tokens_ : 0;
}

Buf MoeBlock::expert_rows(Buf b, int e, int cols) const {
  return runtime::advance(b, e * R_ * cols);
}

Buf MoeBlock::router_rows(Buf b, int cols) const {
  return runtime::advance(b, static_cast<std::int64_t>(router_first_) * cols);
}

Buf MoeBlock::dispatched_rows(Buf b, int cols) const {
  return own_tokens_only() ? router_rows(b, cols) : b;
}

int MoeBlock::dispatched_tokens() const { return own_tokens_only() ? router_tokens_ : N_; }

void MoeBlock::exchange(Buf from, Buf to) const {
  ep_->exchange(from, to, rows() / split_ * C_);
}

std::pair<Buf, Buf> MoeBlock::own_routing(const MoeActs& a, const MoeWorkspace& ws) const {
  if (cp_ == nullptr) return {a.slot, a.weight};
  cp_->take_rows(a.slot, ws.own_slot, k_);
  cp_->take_rows(a.weight, ws.own_weight, k_);
  return {ws.own_slot, ws.own_weight};
}

void MoeBlock::forward(const MoeWeights& w, MoeActs& a, Buf in, Buf out, const MoeWorkspace& ws,
                       const ExpertLinears& linears) const {
  // The logits, routed in place (under cp: of the whole sequences, gathered).
  ops_.linear_forward(cp_ != nullptr ? ws.logits : a.probs, in, w.router, Buf{}, N_, E_, C_);
  if (cp_ != nullptr) cp_->gather_sequences({ws.logits}, {a.probs}, ws.logits_staging, E_);
  // Slots of every expert under the all-to-all, else of the local ones.
  const int first = ep_ != nullptr ? 0 : first_local_expert(), here = ep_ != nullptr ? E_ : local_experts();
  ops_.moe_route(a.probs, a.choice, a.weight, a.slot, a.counts, a.probs, B_, sequence_T_, E_, k_, capacity_, first,
                 here);
  const auto [slot, weight] = own_routing(a, ws);
  // Dispatch: the tokens into the slots, then (all-to-all) to the experts' owners.
  const Buf dispatched = ep_ != nullptr ? ws.exchange : a.expert_in;
  const int n = dispatched_tokens();
  ops_.moe_scatter(dispatched, Buf{}, dispatched_rows(in, C_), Buf{}, dispatched_rows(slot, k_), Buf{}, n, k_,
                   static_cast<int>(rows()), C_);
  if (ep_ != nullptr) exchange(dispatched, a.expert_in);
  const auto R = static_cast<int>(R_);
  const Buf outputs = ep_ != nullptr ? ws.exchange : a.expert_out;
  for (int e = 0; e < rows() / R_; ++e) {  // expert block e: local expert e % local_experts()
    const ExpertWeights& x = w.experts[static_cast<std::size_t>(e % local_experts())];
    const Buf rows_in = expert_rows(a.expert_in, e, C_), gate = expert_rows(a.gate, e, F_),
              up = expert_rows(a.up, e, F_), act = expert_rows(a.act, e, F_);
    const int expert = block_expert(e);
    SharedInput x_in;
    linears(expert, Fp8Linear::Gate, &x_in).forward(gate, rows_in, x.w1, Buf{}, R, F_, C_);
    linears(expert, Fp8Linear::Up, &x_in).forward(up, rows_in, x.w3, Buf{}, R, F_, C_);
    ops_.swiglu_forward(act, gate, up, R_ * F_);
    linears(expert, Fp8Linear::Down, nullptr).forward(expert_rows(outputs, e, C_), act, x.w2, Buf{}, R, C_, F_);
  }
  if (ep_ != nullptr) exchange(outputs, a.expert_out);  // back to the tokens' ranks
  // Only this rank's tokens under tp without the experts split over it: the others' rows are zero
  // in the partial sum over tp.
  if (own_tokens_only()) ops_.fill(out, 0.0f, static_cast<std::int64_t>(N_) * C_);
  ops_.moe_combine(dispatched_rows(out, C_), a.expert_out, dispatched_rows(slot, k_), dispatched_rows(weight, k_), n,
                   k_, C_);
}

void MoeBlock::recompute_activation(MoeActs& a) const {
  ops_.swiglu_forward(a.act, a.gate, a.up, rows() * F_);
}

void MoeBlock::backward(const MoeWeights& w, const MoeActs& a, Buf in, Buf d_out, Buf d_in, const MoeWorkspace& ws,
                        const MoeGrads& g, bool keep, const ExpertLinears& linears) const {
  auto now = [&](Buf grad) { return keep ? Buf{} : grad; };
  const auto R = static_cast<int>(R_);
  // The combine's backward: each kept pair's row gets its weight times the token's gradient, and
  // each weight the dot product of the token's gradient with its expert's output.
  const Buf d_returned = ep_ != nullptr ? ws.exchange : g.d_expert_out;
  const auto [slot, weight] = own_routing(a, ws);
  const int n = dispatched_tokens();
  ops_.moe_scatter(d_returned, dispatched_rows(ws.d_weight, k_), dispatched_rows(d_out, C_), a.expert_out,
                   dispatched_rows(slot, k_), dispatched_rows(weight, k_), n, k_, static_cast<int>(rows()), C_);
  if (ep_ != nullptr) exchange(d_returned, g.d_expert_out);  // to the experts' owners
  if (experts_over_tp_) tp_->sum_partials(ws.d_weight, static_cast<std::int64_t>(N_) * k_);
  for (int e = 0; e < rows() / R_; ++e) {
    const ExpertWeights& x = w.experts[static_cast<std::size_t>(e % local_experts())];
    const Buf rows_in = expert_rows(a.expert_in, e, C_), d_gate = expert_rows(g.d_gate, e, F_),
              d_up = expert_rows(g.d_up, e, F_), d_act = expert_rows(ws.d_act, e, F_),
              d_rows_in = expert_rows(ws.d_expert_in, e, C_);
    const int expert = block_expert(e);
    linears(expert, Fp8Linear::Down, nullptr)
        .backward(d_act, now(x.g_w2), Buf{}, expert_rows(g.d_expert_out, e, C_), expert_rows(a.act, e, F_), x.w2, R,
                  C_, F_);
    ops_.swiglu_backward(d_gate, d_up, d_act, expert_rows(a.gate, e, F_), expert_rows(a.up, e, F_), R_ * F_);
    // w1 and w3 read one input: w3's input gradient is added to w1's, and its weight gradient reads
    // the input's codes w1's cast
    SharedInput x_in;
    linears(expert, Fp8Linear::Gate, &x_in)
        .backward(d_rows_in, now(x.g_w1), Buf{}, d_gate, rows_in, x.w1, R, F_, C_);
    if (!keep)
      linears(expert, Fp8Linear::Up, &x_in).backward(Buf{}, x.g_w3, Buf{}, d_up, rows_in, x.w3, R, F_, C_);
    linears(expert, Fp8Linear::Up, nullptr).input_grad_add(d_rows_in, d_up, x.w3, R, F_, C_);
  }
  // The dispatch's backward: (all-to-all) back to the tokens' ranks, each token's rows summed.
  if (ep_ != nullptr) exchange(ws.d_expert_in, ws.exchange);
  if (own_tokens_only()) ops_.fill(d_in, 0.0f, static_cast<std::int64_t>(N_) * C_);
  ops_.moe_combine(dispatched_rows(d_in, C_), ep_ != nullptr ? ws.exchange : ws.d_expert_in,
                   dispatched_rows(slot, k_), Buf{}, n, k_, C_);
  if (cp_ == nullptr) {
    ops_.moe_route_backward(g.d_logits, ws.d_weight, a.probs, a.choice, a.weight, a.counts, B_, T_, E_, k_,
                            aux_scale_);
  } else {  // over the whole sequences, the other ranks' tokens' weight gradients zero; this rank's rows kept
    const std::int64_t sequence_pairs = static_cast<std::int64_t>(B_) * sequence_T_ * k_;
    ops_.fill(ws.sequence_d_weight, 0.0f, sequence_pairs);
    cp_->place_rows(ws.d_weight, ws.sequence_d_weight, k_);
    ops_.moe_route_backward(ws.sequence_d_logits, ws.sequence_d_weight, a.probs, a.choice, a.weight, a.counts, B_,
                            sequence_T_, E_, k_, aux_scale_);
    cp_->take_rows(ws.sequence_d_logits, g.d_logits, E_);
  }
  // The router reads the block's input too: its input gradient is added to the experts'.
  if (!keep)
    ops_.linear_backward(Buf{}, w.g_router, Buf{}, router_rows(g.d_logits, E_), router_rows(in, C_), w.router,
                         router_tokens_, E_, C_);
  ops_.linear_input_grad_add(router_rows(d_in, C_), router_rows(g.d_logits, E_), w.router, router_tokens_, E_, C_);
}

void MoeBlock::weight_grad(const MoeWeights& w, const MoeActs& a, Buf in, const MoeGrads& g,
                           const ExpertLinears& linears) const {
  const auto R = static_cast<int>(R_);
  for (int e = 0; e < rows() / R_; ++e) {
    const ExpertWeights& x = w.experts[static_cast<std::size_t>(e % local_experts())];
    const Buf rows_in = expert_rows(a.expert_in, e, C_);
    const int expert = block_expert(e);
    linears(expert, Fp8Linear::Down, nullptr)
        .backward(Buf{}, x.g_w2, Buf{}, expert_rows(g.d_expert_out, e, C_), expert_rows(a.act, e, F_), x.w2, R, C_,
                  F_);
    SharedInput x_in;  // w1 and w3 read one input
    linears(expert, Fp8Linear::Gate, &x_in)
        .backward(Buf{}, x.g_w1, Buf{}, expert_rows(g.d_gate, e, F_), rows_in, x.w1, R, F_, C_);
    linears(expert, Fp8Linear::Up, &x_in)
        .backward(Buf{}, x.g_w3, Buf{}, expert_rows(g.d_up, e, F_), rows_in, x.w3, R, F_, C_);
  }
  ops_.linear_backward(Buf{}, w.g_router, Buf{}, router_rows(g.d_logits, E_), router_rows(in, C_), w.router,
                       router_tokens_, E_, C_);
}

}  // namespace ptrain::model
