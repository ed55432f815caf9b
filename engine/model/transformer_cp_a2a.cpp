// Context-parallel attention by all-to-all (parallel/context_parallel.h, cp_comm a2a; DeepSpeed-
// Ulysses): q, k and v go from this rank's chunks of all its heads to the whole sequence of 1/cp of
// them, attention runs over whole sequences, and the output comes back; backward likewise.
#include <algorithm>
#include <vector>

#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;
using Split = parallel::ContextParallel::HeadSplit;

namespace {

// This cp rank's query and kv heads in head layout, and the query heads per kv head.
struct HeadShare {
  int q, kv, group;
  HeadShare(const ModelDims& d, int cp) : q(d.Hq / cp), kv(std::max(d.Hkv / cp, 1)), group(d.Hq / d.Hkv) {}
  Split queries(Buf sequence, Buf heads, const ModelDims& d) const {
    return {sequence, heads, d.Hq, q, q, 1};
  }
  Split keys(Buf sequence, Buf heads, const ModelDims& d) const {
    return {sequence, heads, d.Hkv, kv, q, group};
  }
};

}  // namespace

void Transformer::attend_a2a(LayerActs& a, Buf q, Buf k, Buf v) {
  const auto& d = dims_;
  const HeadShare h(d, cp_->size());
  cp_->to_heads({h.queries(q, a.q, d), h.keys(k, a.k, d), h.keys(v, a.v, d)}, d.D, ws_.a2a_send,
                ws_.a2a_recv);
  ops_.attention_forward(a.att_heads, a.lse, a.q, a.k, a.v,
                         kernels::AttentionShape::self_attention(d.B, cp_->seq_len(), h.q, h.kv, d.D));
  cp_->to_sequence({h.queries(a.att, a.att_heads, d)}, d.D, ws_.a2a_send, ws_.a2a_recv);
}

void Transformer::attend_a2a_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a) {
  const auto& d = dims_;
  const HeadShare h(d, cp_->size());
  cp_->to_heads({h.queries(ws_.d_att, ws_.a2a_d_out, d)}, d.D, ws_.a2a_send, ws_.a2a_recv);
  ops_.attention_backward(ws_.a2a_q, ws_.a2a_k, ws_.a2a_v, ws_.a2a_d_out, a.q, a.k, a.v, a.att_heads, a.lse,
                          kernels::AttentionShape::self_attention(d.B, cp_->seq_len(), h.q, h.kv, d.D));
  cp_->to_sequence({h.queries(d_q, ws_.a2a_q, d), h.keys(d_k, ws_.a2a_k, d), h.keys(d_v, ws_.a2a_v, d)}, d.D,
                   ws_.a2a_send, ws_.a2a_recv);
}

}  // namespace ptrain::model
