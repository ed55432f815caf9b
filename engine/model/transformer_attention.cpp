// The attention branch of a transformer layer (model/transformer.h): q/k/v projections, RoPE, flash
// attention (under context parallelism over the other cp ranks' keys too, transformer_cp_*.cpp), the
// output projection, and their backward and weight gradients (kv copies summed over the tp ranks that
// share a kv head).
#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;

// From the norm1 output to the attention output projection (in ws_.proj_out).
Buf Transformer::attention_forward(const LayerWeights& w, LayerActs& a) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  const Buf in = gather_tokens(a.norm1, ws_.gathered);
  // Under cp_comm a2a the layer keeps q, k and v in head layout: the projections write the workspace.
  const bool a2a = cp_ != nullptr && cp_->mode() == config::CpComm::A2a;
  const Buf q = a2a ? ws_.a2a_q : a.q, k = a2a ? ws_.a2a_k : a.k, v = a2a ? ws_.a2a_v : a.v;
  SharedInput x;  // q, k and v read one input: cast once (its amax the norm's)
  linears(w, Fp8Linear::Q, &x).forward(q, in, w.wq, w.bq, d.N, q_cols, d.C, input_amax(a, kNorm1Amax));
  linears(w, Fp8Linear::K, &x).forward(k, in, w.wk, w.bk, d.N, kv_cols, d.C);
  linears(w, Fp8Linear::V, &x).forward(v, in, w.wv, w.bv, d.N, kv_cols, d.C);
  if (!d.gpt2) {
    rope(q, d.Hq, false);
    rope(k, d.Hkv, false);
  }
  attend(a, q, k, v);
  // The attention output's amax (fp8 current scaling), taken once: the weight gradient reads it again.
  const Buf att_amax = input_amax(a, kAttentionAmax);
  if (att_amax) ops_.abs_max(att_amax, a.att, static_cast<std::int64_t>(d.N) * q_cols, false);
  linears(w, Fp8Linear::O)
      .forward(ws_.proj_out, a.att, w.wo, row_parallel_bias(w.bo), d.N, d.C, q_cols, att_amax);
  return reduce_tokens(ws_.proj_out);
}

void Transformer::rope(Buf x, int H, bool inverse) const {
  const auto& d = dims_;
  for (const QueryChunk& c : query_chunks_) {
    const Buf rows = runtime::advance(x, c.first_row * H * d.D);
    if (inverse)
      ops_.rope_backward(rows, d.B, c.len, H, d.D, d.rope_theta, c.pos0);
    else
      ops_.rope_forward(rows, d.B, c.len, H, d.D, d.rope_theta, c.pos0);
  }
}

Buf Transformer::chunk_rows(Buf x, int i, int cols) const {
  return runtime::advance(x, query_chunks_[static_cast<std::size_t>(i)].first_row * cols);
}

void Transformer::attend(LayerActs& a, Buf q, Buf k, Buf v) {
  const auto& d = dims_;
  if (cp_ == nullptr)
    return ops_.attention_forward(a.att, a.lse, q, k, v,
                                  kernels::AttentionShape::self_attention(d.B, d.T, d.Hq, d.Hkv, d.D));
  switch (cp_->mode()) {
    case config::CpComm::Allgather: return attend_allgather(a);
    case config::CpComm::Ring: return attend_ring(a);
    case config::CpComm::A2a: return attend_a2a(a, q, k, v);
  }
}

void Transformer::attend_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a, bool kv_gathered) {
  const auto& d = dims_;
  if (cp_ == nullptr)
    return ops_.attention_backward(d_q, d_k, d_v, ws_.d_att, a.q, a.k, a.v, a.att, a.lse,
                                   kernels::AttentionShape::self_attention(d.B, d.T, d.Hq, d.Hkv, d.D));
  switch (cp_->mode()) {
    case config::CpComm::Allgather: return attend_allgather_backward(d_q, d_k, d_v, a, kv_gathered);
    case config::CpComm::Ring: return attend_ring_backward(d_q, d_k, d_v, a);
    case config::CpComm::A2a: return attend_a2a_backward(d_q, d_k, d_v, a);
  }
}

void Transformer::attention_backward(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g, bool keep,
                                     bool kv_gathered) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  const std::int64_t mine = static_cast<std::int64_t>(d.Ns) * d.C;  // this rank's residual stream
  // A linear layer's weight gradient now, or (keep) its output gradient for weight_grad.
  auto now = [&](Buf grad) { return keep ? Buf{} : grad; };
  if (keep) ops_.convert(g.d_attention, ws_.d_res, mine);
  const Buf d_attention_out = gather_tokens(ws_.d_res, ws_.d_full);
  const Buf d_q = g.d_q, d_k = g.d_k, d_v = g.d_v;
  // fp8 current scaling: each output gradient's amax taken once, read by every cast of it.
  const Buf d_attention_amax = output_grad_amax(g, kDAttentionAmax);
  if (d_attention_amax) ops_.abs_max(d_attention_amax, d_attention_out, static_cast<std::int64_t>(d.N) * d.C, false);
  linears(w, Fp8Linear::O)
      .backward(ws_.d_att, now(w.g_wo), now(w.g_bo), d_attention_out, a.att, w.wo, d.N, d.C, q_cols,
                {.in = input_amax(a, kAttentionAmax), .d_out = d_attention_amax});
  attend_backward(d_q, d_k, d_v, a, kv_gathered);
  if (!d.gpt2) {
    rope(d_q, d.Hq, true);
    rope(d_k, d.Hkv, true);
  }
  // kv heads shared by several tp ranks: each copy's weight gradient takes every sharer's output
  // gradient, and one copy passes the input gradient on.
  const std::int64_t kv_elements = static_cast<std::int64_t>(d.N) * kv_cols;
  const bool passes_kv = tp_ == nullptr || tp_->first_kv_copy();
  if (tp_ != nullptr) {
    tp_->sum_kv_copies(d_k, kv_elements);
    tp_->sum_kv_copies(d_v, kv_elements);
  }
  const Buf d_q_amax = output_grad_amax(g, kDQAmax), d_k_amax = output_grad_amax(g, kDKAmax),
            d_v_amax = output_grad_amax(g, kDVAmax);
  if (d_q_amax) {
    ops_.abs_max(d_q_amax, d_q, static_cast<std::int64_t>(d.N) * q_cols, false);
    ops_.abs_max(d_k_amax, d_k, kv_elements, false);
    ops_.abs_max(d_v_amax, d_v, kv_elements, false);
  }
  // q, k and v read one input: k's and v's input gradients are added to q's in their GEMMs, and
  // their weight gradients read the input's codes q's cast.
  const Buf qkv_in = gather_tokens(a.norm1, ws_.gathered);
  SharedInput x;
  const Buf in_amax = input_amax(a, kNorm1Amax);
  linears(w, Fp8Linear::Q, &x)
      .backward(ws_.d_norm, now(w.g_wq), now(w.g_bq), d_q, qkv_in, w.wq, d.N, q_cols, d.C,
                {.in = in_amax, .d_out = d_q_amax});
  if (!keep) {
    linears(w, Fp8Linear::K, &x)
        .backward(Buf{}, w.g_wk, w.g_bk, d_k, qkv_in, w.wk, d.N, kv_cols, d.C, {.in = in_amax, .d_out = d_k_amax});
    linears(w, Fp8Linear::V, &x)
        .backward(Buf{}, w.g_wv, w.g_bv, d_v, qkv_in, w.wv, d.N, kv_cols, d.C, {.in = in_amax, .d_out = d_v_amax});
  }
  linears(w, Fp8Linear::K).input_grad_add(ws_.d_norm, d_k, w.wk, d.N, kv_cols, d.C, passes_kv, d_k_amax);
  linears(w, Fp8Linear::V).input_grad_add(ws_.d_norm, d_v, w.wv, d.N, kv_cols, d.C, passes_kv, d_v_amax);
}

void Transformer::attention_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  // Sequence parallelism: the kept residual gradient and the norm output are this rank's tokens.
  // fp8 current scaling: the amaxes the backward's casts read.
  linears(w, Fp8Linear::O)
      .backward(Buf{}, w.g_wo, w.g_bo, gather_tokens(g.d_attention, ws_.d_full), a.att, w.wo, d.N, d.C, q_cols,
                {.in = input_amax(a, kAttentionAmax), .d_out = output_grad_amax(g, kDAttentionAmax)});
  const Buf qkv_in = gather_tokens(a.norm1, ws_.gathered), in_amax = input_amax(a, kNorm1Amax);
  SharedInput x;  // q, k and v read one input
  linears(w, Fp8Linear::Q, &x)
      .backward(Buf{}, w.g_wq, w.g_bq, g.d_q, qkv_in, w.wq, d.N, q_cols, d.C,
                {.in = in_amax, .d_out = output_grad_amax(g, kDQAmax)});
  linears(w, Fp8Linear::K, &x)
      .backward(Buf{}, w.g_wk, w.g_bk, g.d_k, qkv_in, w.wk, d.N, kv_cols, d.C,
                {.in = in_amax, .d_out = output_grad_amax(g, kDKAmax)});
  linears(w, Fp8Linear::V, &x)
      .backward(Buf{}, w.g_wv, w.g_bv, g.d_v, qkv_in, w.wv, d.N, kv_cols, d.C,
                {.in = in_amax, .d_out = output_grad_amax(g, kDVAmax)});
}


}  // namespace ptrain::model
