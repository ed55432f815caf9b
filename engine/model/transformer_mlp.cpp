// The MLP branch of a transformer layer (model/transformer.h): GPT-2's GELU MLP, Llama's SwiGLU, or
// Mixtral's routed experts (model/moe_block.h), with their backward and weight gradients.
#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;

// From the norm2 output to the MLP output projection (in ws_.proj_out).
Buf Transformer::mlp_forward(const LayerWeights& w, LayerActs& a) {
  const auto& d = dims_;
  const std::int64_t nf = static_cast<std::int64_t>(d.N) * d.F;
  const Buf in = gather_tokens(a.norm2, ws_.gathered);
  if (moe_) {  // a partial sum over tp when the experts are split over the tp group
    moe_->forward(w.moe, a.moe, in, ws_.proj_out, ws_.moe, expert_linears(w));
    return reduce_tokens(ws_.proj_out);
  }
  // Under fp8 current scaling the norm's and the activation's amaxes are taken as they write them.
  const Buf in_amax = input_amax(a, kNorm2Amax), act_amax = input_amax(a, kActivationAmax);
  if (d.gpt2) {
    linears(w, Fp8Linear::Up).forward_gelu(a.act, a.up, in, w.w_up, w.b_up, d.N, d.F, d.C, in_amax, act_amax);
  } else {
    SharedInput x;  // up and gate read one input: cast once
    linears(w, Fp8Linear::Up, &x).forward(a.up, in, w.w_up, w.b_up, d.N, d.F, d.C, in_amax);
    linears(w, Fp8Linear::Gate, &x).forward(a.gate, in, w.w_gate, Buf{}, d.N, d.F, d.C);
    ops_.swiglu_forward(a.act, a.gate, a.up, nf, act_amax);
  }
  linears(w, Fp8Linear::Down)
      .forward(ws_.proj_out, a.act, w.w_down, row_parallel_bias(w.b_down), d.N, d.C, d.F, act_amax);
  return reduce_tokens(ws_.proj_out);
}

void Transformer::mlp_backward(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g,
                               bool keep) {
  const auto& d = dims_;
  const std::int64_t nf = static_cast<std::int64_t>(d.N) * d.F;
  auto now = [&](Buf grad) { return keep ? Buf{} : grad; };
  if (moe_)
    return moe_->backward(w.moe, a.moe, gather_tokens(a.norm2, ws_.gathered),
                          gather_tokens(ws_.d_res, ws_.d_full), ws_.d_norm, ws_.moe, g.moe, keep, expert_linears(w));
  if (keep) ops_.convert(g.d_mlp, ws_.d_res, static_cast<std::int64_t>(d.Ns) * d.C);
  const Buf d_mlp_out = gather_tokens(ws_.d_res, ws_.d_full);
  const Buf up_in = gather_tokens(a.norm2, ws_.gathered);
  const Buf d_up = g.d_up;
  // fp8 current scaling: the inputs' amaxes kept from the forward; the output gradients' taken once
  // (the activation backward's as it writes them), read by every cast of them.
  const Buf in_amax = input_amax(a, kNorm2Amax), act_amax = input_amax(a, kActivationAmax);
  const Buf d_up_amax = output_grad_amax(g, kDUpAmax), d_gate_amax = output_grad_amax(g, kDGateAmax);
  const Buf d_mlp_amax = output_grad_amax(g, kDMlpAmax);
  if (d_mlp_amax) ops_.abs_max(d_mlp_amax, d_mlp_out, static_cast<std::int64_t>(d.N) * d.C, false);
  if (d.gpt2) {
    linears(w, Fp8Linear::Down)
        .backward_gelu(d_up, now(w.g_down), now(w.g_b_down), d_mlp_out, a.act, w.w_down, a.up, d.N, d.C, d.F,
                       {.in = act_amax, .d_out = d_mlp_amax}, d_up_amax);
    linears(w, Fp8Linear::Up)
        .backward(ws_.d_norm, now(w.g_up), now(w.g_b_up), d_up, up_in, w.w_up, d.N, d.F, d.C,
                  {.in = in_amax, .d_out = d_up_amax});
  } else {
    const Buf d_gate = g.d_gate;
    linears(w, Fp8Linear::Down)
        .backward(ws_.d_act, now(w.g_down), now(w.g_b_down), d_mlp_out, a.act, w.w_down, d.N, d.C, d.F,
                  {.in = act_amax, .d_out = d_mlp_amax});
    ops_.swiglu_backward(d_gate, d_up, ws_.d_act, a.gate, a.up, nf, d_gate_amax);  // and d_up_amax after it
    // gate and up read one input: up's input gradient is added to gate's in its GEMM, and its weight
    // gradient reads the input's codes gate's cast
    SharedInput x;
    linears(w, Fp8Linear::Gate, &x)
        .backward(ws_.d_norm, now(w.g_gate), Buf{}, d_gate, up_in, w.w_gate, d.N, d.F, d.C,
                  {.in = in_amax, .d_out = d_gate_amax});
    if (!keep)
      linears(w, Fp8Linear::Up, &x)
          .backward(Buf{}, w.g_up, Buf{}, d_up, up_in, w.w_up, d.N, d.F, d.C, {.in = in_amax, .d_out = d_up_amax});
    linears(w, Fp8Linear::Up).input_grad_add(ws_.d_norm, d_up, w.w_up, d.N, d.F, d.C, true, d_up_amax);
  }
}

void Transformer::mlp_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g) {
  const auto& d = dims_;
  // Sequence parallelism: the kept residual gradient and the norm output are this rank's tokens.
  const Buf up_in = gather_tokens(a.norm2, ws_.gathered);
  if (moe_) return moe_->weight_grad(w.moe, a.moe, up_in, g.moe, expert_linears(w));
  const Buf in_amax = input_amax(a, kNorm2Amax);
  linears(w, Fp8Linear::Down)
      .backward(Buf{}, w.g_down, w.g_b_down, gather_tokens(g.d_mlp, ws_.d_full), a.act, w.w_down, d.N, d.C, d.F,
                {.in = input_amax(a, kActivationAmax), .d_out = output_grad_amax(g, kDMlpAmax)});
  SharedInput x;  // gate and up read one input
  if (!d.gpt2)
    linears(w, Fp8Linear::Gate, &x)
        .backward(Buf{}, w.g_gate, Buf{}, g.d_gate, up_in, w.w_gate, d.N, d.F, d.C,
                  {.in = in_amax, .d_out = output_grad_amax(g, kDGateAmax)});
  linears(w, Fp8Linear::Up, &x)
      .backward(Buf{}, w.g_up, w.g_b_up, g.d_up, up_in, w.w_up, d.N, d.F, d.C,
                {.in = in_amax, .d_out = output_grad_amax(g, kDUpAmax)});
}


}  // namespace ptrain::model
