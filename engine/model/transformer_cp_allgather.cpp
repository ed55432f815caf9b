// Context-parallel attention by all-gather (parallel/context_parallel.h, cp_comm allgather): every
// layer gathers the whole sequence's k and v, and sums their gradients back into each rank's rows.
#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;

void Transformer::attend_allgather(LayerActs& a) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D;
  cp_->gather_sequences({a.k, a.v}, {ws_.cp_k, ws_.cp_v}, ws_.cp_staging, d.Hkv * d.D);
  for (std::size_t i = 0; i < query_chunks_.size(); ++i) {
    const QueryChunk& c = query_chunks_[i];
    const Buf lse = runtime::advance(a.lse, static_cast<std::int64_t>(i) * d.B * d.Hq * c.len);
    ops_.attention_forward(runtime::advance(a.att, c.first_row * q_cols), lse,
                           runtime::advance(a.q, c.first_row * q_cols), ws_.cp_k, ws_.cp_v,
                           {d.B, c.len, cp_->seq_len(), c.pos0, d.Hq, d.Hkv, d.D});
  }
}

void Transformer::attend_allgather_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a, bool kv_gathered) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D;
  if (!kv_gathered) cp_->gather_sequences({a.k, a.v}, {ws_.cp_k, ws_.cp_v}, ws_.cp_staging, kv_cols);
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
  cp_->sum_into_chunks({ws_.cp_dk, ws_.cp_dv}, {d_k, d_v}, ws_.cp_staging, kv_cols);
}

}  // namespace ptrain::model
