// Context-parallel attention around a ring (parallel/context_parallel.h, cp_comm ring): the cp ranks'
// k and v pass from rank to rank, each rank attending its two query chunks to the chunks in hand and
// folding the blocks into its output by their log-sum-exps; in backward the k and v go around again
// with their gradients, to which each rank adds its queries' part, until they are home.
#include <utility>

#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;

namespace {

// One rank's k and v as one message: [2: k, v][N, cols], key chunk j of each at rows j * B * L.
struct KeysValues {
  Buf both;
  std::int64_t elements;  // of one of k, v
  std::int64_t chunk;     // elements of one key chunk of one of them
  Buf k(int j) const { return runtime::advance(both, j * chunk); }
  Buf v(int j) const { return runtime::advance(both, elements + j * chunk); }
};

}  // namespace

void Transformer::attend_ring(LayerActs& a) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D, L = cp_->chunk_len();
  const std::int64_t kv = static_cast<std::int64_t>(d.N) * kv_cols,
                     chunk = static_cast<std::int64_t>(d.B) * L;
  const std::size_t bytes = static_cast<std::size_t>(2 * kv) * kernels::dtype_size(act_);
  KeysValues held{ws_.ring_kv, kv, chunk * kv_cols},
      arriving{runtime::advance(ws_.ring_kv, 2 * kv), kv, chunk * kv_cols};
  ops_.copy(held.k(0), a.k, bytes / 2);
  ops_.copy(held.v(0), a.v, bytes / 2);
  bool written[2] = {false, false};  // a query chunk's output holds its first block
  for (int step = 0; step < cp_->size(); ++step) {
    const bool passes_on = step + 1 < cp_->size();
    if (passes_on) cp_->send_to_next(held.both, bytes);  // on its way while this step attends
    for (const parallel::ContextParallel::RingBlock& b : cp_->ring_blocks(step)) {
      const int i = b.query_chunk;
      const Buf out = chunk_rows(a.att, i, q_cols), lse = runtime::advance(a.lse, i * chunk * d.Hq);
      const bool first = !written[i];
      written[i] = true;
      ops_.attention_forward(first ? out : ws_.ring_part, first ? lse : ws_.ring_part_lse,
                             chunk_rows(a.q, i, q_cols), held.k(b.key_chunk), held.v(b.key_chunk),
                             {d.B, L, L, b.q_pos0, d.Hq, d.Hkv, d.D});
      if (!first) ops_.attention_merge(out, lse, ws_.ring_part, ws_.ring_part_lse, d.B, L, d.Hq, d.D);
    }
    if (!passes_on) break;
    cp_->receive_from_previous(arriving.both, bytes);
    cp_->finish_sends();
    std::swap(held, arriving);
  }
}

void Transformer::attend_ring_backward(Buf d_q, Buf d_k, Buf d_v, const LayerActs& a) {
  const auto& d = dims_;
  const int q_cols = d.Hq * d.D, kv_cols = d.Hkv * d.D, L = cp_->chunk_len();
  const std::int64_t kv = static_cast<std::int64_t>(d.N) * kv_cols,
                     chunk = static_cast<std::int64_t>(d.B) * L;
  const std::size_t bytes = static_cast<std::size_t>(2 * kv) * kernels::dtype_size(act_);
  const std::int64_t block = chunk * kv_cols;
  KeysValues held{ws_.ring_kv, kv, block}, arriving{runtime::advance(ws_.ring_kv, 2 * kv), kv, block};
  // The gradients of the k and v in hand, travelling with them.
  KeysValues held_d{ws_.ring_dkv, kv, block}, arriving_d{runtime::advance(ws_.ring_dkv, 2 * kv), kv, block};
  ops_.copy(held.k(0), a.k, bytes / 2);
  ops_.copy(held.v(0), a.v, bytes / 2);
  ops_.fill(held_d.both, 0.0f, 2 * kv);
  const Buf part_dk = ws_.ring_part_dkv, part_dv = runtime::advance(ws_.ring_part_dkv, block);
  bool written[2] = {false, false};  // a query chunk's d_q holds its first block's
  for (int step = 0; step < cp_->size(); ++step) {
    const bool passes_on = step + 1 < cp_->size();
    if (passes_on) cp_->send_to_next(held.both, bytes);
    for (const parallel::ContextParallel::RingBlock& b : cp_->ring_blocks(step)) {
      const int i = b.query_chunk, j = b.key_chunk;
      const Buf dq = chunk_rows(d_q, i, q_cols);
      const bool first = !written[i];
      written[i] = true;
      // The block's probabilities come from the whole row's log-sum-exp and output (forward's
      // merged ones), so each block's gradients are its exact share.
      ops_.attention_backward(first ? dq : ws_.ring_part, part_dk, part_dv, chunk_rows(ws_.d_att, i, q_cols),
                              chunk_rows(a.q, i, q_cols), held.k(j), held.v(j), chunk_rows(a.att, i, q_cols),
                              runtime::advance(a.lse, i * chunk * d.Hq),
                              {d.B, L, L, b.q_pos0, d.Hq, d.Hkv, d.D});
      if (!first) ops_.accumulate(dq, ws_.ring_part, chunk * q_cols);
      ops_.accumulate(held_d.k(j), part_dk, block);
      ops_.accumulate(held_d.v(j), part_dv, block);
    }
    // The gradients go on with their k and v; after the last step, home to the rank they belong to.
    cp_->send_to_next(held_d.both, bytes);
    if (passes_on) cp_->receive_from_previous(arriving.both, bytes);
    cp_->receive_from_previous(arriving_d.both, bytes);
    cp_->finish_sends();
    std::swap(held, arriving);
    std::swap(held_d, arriving_d);
  }
  ops_.copy(d_k, held_d.k(0), bytes / 2);
  ops_.copy(d_v, held_d.v(0), bytes / 2);
}

}  // namespace ptrain::model
