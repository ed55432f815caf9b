// The attention branch of a transformer layer (model/transformer.h): q/k/v projections, RoPE, flash
// attention (over the sequence's keys gathered from the cp group under context parallelism), the
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
  ops_.linear_forward(a.q, in, w.wq, w.bq, d.N, q_cols, d.C);
  ops_.linear_forward(a.k, in, w.wk, w.bk, d.N, kv_cols, d.C);
  ops_.linear_forward(a.v, in, w.wv, w.bv, d.N, kv_cols, d.C);
  if (!d.gpt2) {
    rope(a.q, d.Hq, false);
    rope(a.k, d.Hkv, false);
  }
  attend(a);
  ops_.linear_forward(ws_.proj_out, a.att, w.wo, row_parallel_bias(w.bo), d.N, d.C, q_cols);
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

void Transformer::attend(LayerActs& a) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D;
  Buf k = a.k, v = a.v;
  int keys = d.T;
  if (cp_ != nullptr) {
    cp_->gather_sequences(a.k, a.v, ws_.cp_k, ws_.cp_v, ws_.cp_staging, d.Hkv * d.D);
    k = ws_.cp_k, v = ws_.cp_v, keys = cp_->seq_len();
  }
  for (std::size_t i = 0; i < query_chunks_.size(); ++i) {
    const QueryChunk& c = query_chunks_[i];
    const Buf lse =
        a.lse ? runtime::advance(a.lse, static_cast<std::int64_t>(i) * d.B * d.Hq * c.len) : Buf{};
    ops_.attention_forward(runtime::advance(a.att, c.first_row * q_cols), lse,
                           runtime::advance(a.q, c.first_row * q_cols), k, v,
                           {d.B, c.len, keys, c.pos0, d.Hq, d.Hkv, d.D});
  }
}

void Transformer::attend_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a, bool kv_gathered) {
  const auto& d = dims_;
  if (cp_ == nullptr)
    return ops_.attention_backward(d_q, d_k, d_v, ws_.d_att, a.q, a.k, a.v, a.att, a.lse,
                                   kernels::AttentionShape::self_attention(d.B, d.T, d.Hq, d.Hkv, d.D));
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  if (!kv_gathered) cp_->gather_sequences(a.k, a.v, ws_.cp_k, ws_.cp_v, ws_.cp_staging, kv_cols);
  // The sequence's d_k and d_v: the late chunk's into cp_dk and cp_dv, the early chunk's into the
  // staging (free until the sum over cp), added.
  const std::int64_t sequence_kv = static_cast<std::int64_t>(d.N) * cp_->size() * kv_cols;
  for (int i : {1, 0}) {
    const QueryChunk& c = query_chunks_[static_cast<std::size_t>(i)];
    const Buf dk = i == 1 ? ws_.cp_dk : ws_.cp_staging;
    const Buf dv = i == 1 ? ws_.cp_dv : runtime::advance(ws_.cp_staging, sequence_kv);
    const auto q_rows = [&](Buf x) { return runtime::advance(x, c.first_row * q_cols); };
    ops_.attention_backward(q_rows(d_q), dk, dv, q_rows(ws_.d_att), q_rows(a.q), ws_.cp_k, ws_.cp_v,
                            q_rows(a.att),
                            runtime::advance(a.lse, static_cast<std::int64_t>(i) * d.B * d.Hq * c.len),
                            {d.B, c.len, cp_->seq_len(), c.pos0, d.Hq, d.Hkv, d.D});
  }
  ops_.accumulate(ws_.cp_dk, ws_.cp_staging, sequence_kv);
  ops_.accumulate(ws_.cp_dv, runtime::advance(ws_.cp_staging, sequence_kv), sequence_kv);
  cp_->sum_into_chunks(ws_.cp_dk, ws_.cp_dv, d_k, d_v, ws_.cp_staging, kv_cols);
}

void Transformer::attention_backward(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g, bool keep,
                                     bool kv_gathered) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  const std::int64_t nc = static_cast<std::int64_t>(d.N) * d.C;
  const std::int64_t mine = static_cast<std::int64_t>(d.Ns) * d.C;  // this rank's residual stream
  // A linear layer's weight gradient now, or (keep) its output gradient for weight_grad.
  auto now = [&](Buf grad) { return keep ? Buf{} : grad; };
  if (keep) ops_.convert(g.d_attention, ws_.d_res, mine);
  const Buf d_attention_out = gather_tokens(ws_.d_res, ws_.d_full);
  const Buf d_q = g.d_q, d_k = g.d_k, d_v = g.d_v;
  ops_.linear_backward(ws_.d_att, now(w.g_wo), now(w.g_bo), d_attention_out, a.att, w.wo, d.N, d.C, q_cols);
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
  const Buf d_in_kv = passes_kv ? ws_.d_tmp : Buf{};
  const Buf qkv_in = gather_tokens(a.norm1, ws_.gathered);
  ops_.linear_backward(ws_.d_norm, now(w.g_wq), now(w.g_bq), d_q, qkv_in, w.wq, d.N, q_cols, d.C);
  ops_.linear_backward(d_in_kv, now(w.g_wk), now(w.g_bk), d_k, qkv_in, w.wk, d.N, kv_cols, d.C);
  if (passes_kv) ops_.accumulate(ws_.d_norm, ws_.d_tmp, nc);
  ops_.linear_backward(d_in_kv, now(w.g_wv), now(w.g_bv), d_v, qkv_in, w.wv, d.N, kv_cols, d.C);
  if (passes_kv) ops_.accumulate(ws_.d_norm, ws_.d_tmp, nc);
}

void Transformer::attention_weight_grad(const LayerWeights& w, const LayerActs& a, const LayerOutputGrads& g) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  // Sequence parallelism: the kept residual gradient and the norm output are this rank's tokens.
  ops_.linear_backward(Buf{}, w.g_wo, w.g_bo, gather_tokens(g.d_attention, ws_.d_full), a.att, w.wo, d.N, d.C,
                       q_cols);
  const Buf qkv_in = gather_tokens(a.norm1, ws_.gathered);
  ops_.linear_backward(Buf{}, w.g_wq, w.g_bq, g.d_q, qkv_in, w.wq, d.N, q_cols, d.C);
  ops_.linear_backward(Buf{}, w.g_wk, w.g_bk, g.d_k, qkv_in, w.wk, d.N, kv_cols, d.C);
  ops_.linear_backward(Buf{}, w.g_wv, w.g_bv, g.d_v, qkv_in, w.wv, d.N, kv_cols, d.C);
}


}  // namespace ptrain::model
