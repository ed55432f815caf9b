// The two ends of the model over the vocabulary (model/transformer.h): the token embedding (GPT-2's
// learned positions with it) and the fused softmax cross-entropy of the LM head's logits, both
// vocab-parallel under tensor parallelism (each rank holds a shard of the padded vocabulary's rows).
#include "engine/model/transformer.h"

namespace ptrain::model {

using kernels::Buf;

void Transformer::embed(Buf out, Buf tokens, Buf positions) {
  const auto& d = dims_;
  for (const QueryChunk& c : query_chunks_)
    ops_.embedding_forward(
        runtime::advance(out, c.first_row * d.C), runtime::advance(tokens, c.first_row),
        params_.param(ends_.word_embedding),
        positions ? runtime::advance(positions, static_cast<std::int64_t>(c.pos0) * d.C) : Buf{}, d.B * c.len,
        c.len, d.C);
}

void Transformer::embed_backward(Buf d_out, Buf tokens, Buf d_positions) {
  const auto& d = dims_;
  for (const QueryChunk& c : query_chunks_)
    ops_.embedding_backward(
        params_.grad(ends_.word_embedding),
        d_positions ? runtime::advance(d_positions, static_cast<std::int64_t>(c.pos0) * d.C) : Buf{},
        runtime::advance(d_out, c.first_row * d.C), runtime::advance(tokens, c.first_row), d.B * c.len, c.len,
        d.C);
}

// The fused loss only reads the targets; with a gradient it overwrites the logits by it.
void Transformer::cross_entropy(Slot& s, bool with_grad, float grad_scale) {
  const auto& d = dims_;
  const Buf d_logits = with_grad ? s.logits : Buf{};
  if (tp_ == nullptr)
    return ops_.cross_entropy_forward_backward(s.losses, d_logits, s.logits, s.targets, d.N, d.V, d.Vp,
                                               grad_scale);
  // Vocab-parallel: this shard's (max, sum, target logit) per row, every shard's gathered, then the
  // loss and this shard's gradient.
  const std::int64_t stats = static_cast<std::int64_t>(d.N) * kernels::kCrossEntropyShardStats;
  ops_.cross_entropy_shard_stats(runtime::advance(s.loss_stats, tp_rank() * stats), s.logits, s.targets, d.N,
                                 d.V, d.Vp, tp_rank());
  tp_->gather_chunks(s.loss_stats, stats);
  ops_.cross_entropy_shard_forward_backward(s.losses, d_logits, s.logits, s.loss_stats, s.targets, d.N, d.V,
                                            d.Vp, tp_rank(), tp_->size(), grad_scale);
}

const std::int32_t* Transformer::shard_token_ids(const std::int32_t* tokens) {
  const std::int64_t begin = static_cast<std::int64_t>(tp_rank()) * dims_.Vp, end = begin + dims_.Vp;
  shard_ids_.resize(static_cast<std::size_t>(dims_.N));
  for (std::size_t n = 0; n < shard_ids_.size(); ++n)
    shard_ids_[n] = tokens[n] >= begin && tokens[n] < end ? static_cast<std::int32_t>(tokens[n] - begin)
                                                          : kernels::kRowElsewhere;
  return shard_ids_.data();
}

}  // namespace ptrain::model
