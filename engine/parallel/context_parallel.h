// Context parallelism (parallel.cp > 1): the ranks of a cp group split each sequence.
//
// The T positions are cut into 2 cp chunks of L = T / (2 cp) positions; rank r holds chunks r and
// 2 cp - 1 - r, so that every rank does the same causal attention work (its early chunk sees few
// keys, its late chunk many; Megatron-LM's load balancing). A rank's N = B * 2L tokens are laid out
// chunk-major: token t of chunk j (0: the early one, 1: the late one) of sequence b is row
// (j B + b) L + t. Every token-wise layer (linear layers, norms, the MLP, the loss) runs on these
// rows like on any others; the positions (RoPE, GPT-2's learned positions) come from chunk_start.
//
// Attention needs every earlier key; parallel.cp_comm says how a rank reaches the others':
//
// allgather (the Llama 3 approach): each layer all-gathers k and v over the cp group into sequence
//   order [B, T] (gather_sequences) and attends each of the rank's two query chunks to them
//   (kernels::AttentionShape with q_pos0 = the chunk's start). Backward gathers again (the gathered
//   copy, the whole sequence's k and v, is not kept per layer), unless full recompute's re-run
//   forward just did, computes d_k and d_v for the whole sequence and sums them over cp into each
//   rank's own rows (sum_into_chunks). Per layer and microbatch: one all-gather forward, one
//   all-gather and one reduce-scatter backward.
// ring (ring attention; Megatron-LM's p2p context parallelism): the ranks' k and v pass around the
//   ring, cp - 1 hops: at step s a rank holds rank (r - s)'s and attends its queries to them,
//   chunk by chunk (a full block where the keys' chunk comes before the queries', the causal
//   diagonal where it is theirs, nothing where it comes after), folding each block into the
//   output by its log-sum-exp (Ops::attention_merge), while the next rank's k and v are on their
//   way (send_to_next before the step's attention, receive_from_previous after). Backward passes
//   them around again, with their gradients travelling alongside: each rank adds its queries'
//   part, and the last hop brings each rank its own. A rank holds two ranks' k and v at a time,
//   never the whole sequence's.
// a2a (DeepSpeed-Ulysses): an all-to-all turns q, k and v from this rank's chunks of all its heads
//   into the whole sequence of 1/cp of its heads (to_heads); attention runs over whole sequences,
//   and a second all-to-all brings the output back (to_sequence); backward likewise for the output
//   gradient and for d_q, d_k, d_v. Kv heads fewer than cp are copied to the ranks whose query
//   heads read them, and the copies' gradients summed on the way back.
//
// validate's memory and traffic models count the same (model/layer_description.cpp).
//
// Buffers are in `memory`'s device; a Comm that cannot reach it works on host copies (StagedCollectives).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"
#include "engine/parallel/staged_collectives.h"
#include "kernels/buffer.h"
#include "kernels/ops.h"

namespace ptrain::parallel {

class ContextParallel {
 public:
  // Throws std::invalid_argument unless seq_len is a multiple of 2 * cp.size() and this rank is in cp.
  // Under ring, opens the ring's channels (collective over cp) for messages of up to
  // ring_message_bytes.
  ContextParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& cp, int micro_batch,
                  int seq_len, config::CpComm mode = config::CpComm::Allgather, std::size_t ring_message_bytes = 0);

  config::CpComm mode() const { return mode_; }

  int rank() const { return cp_.index; }
  int size() const { return cp_.size(); }
  int micro_batch() const { return micro_batch_; }
  int seq_len() const { return seq_len_; }
  int chunk_len() const { return chunk_len_; }  // L
  // The first position of this rank's chunk j (0 or 1), and of cp rank r's.
  int chunk_start(int j) const { return chunk_start(rank(), j); }
  int chunk_start(int r, int j) const { return chunk_of(r, j) * chunk_len_; }

  // This rank's [2, B, L] rows of a [B, T] batch of token ids (host memory).
  void take_chunks(const std::int32_t* batch, std::int32_t* mine) const;
  // mine[i]: this rank's [N, cols] rows of tensor i (k and v; the router's logits); full[i]
  // receives every rank's rows in sequence order, [B, T, cols]. staging: B T cols elements per
  // tensor, of their dtype.
  void gather_sequences(const std::vector<kernels::Buf>& mine, const std::vector<kernels::Buf>& full,
                        kernels::Buf staging, int cols);
  // full[i]: [B, T, cols] partial sums (d_k and d_v); mine[i] receives this rank's rows of their sums
  // over the cp group. staging as above.
  void sum_into_chunks(const std::vector<kernels::Buf>& full, const std::vector<kernels::Buf>& mine,
                       kernels::Buf staging, int cols);
  // Between a tensor in sequence order ([B, T, cols], any dtype) and this rank's rows of it
  // ([N, cols]): take copies them out, place copies them in (the other ranks' rows untouched).
  void take_rows(kernels::Buf full, kernels::Buf mine, int cols) const;
  void place_rows(kernels::Buf mine, kernels::Buf full, int cols) const;

  // ring: the cp rank whose k and v this one holds at step s; the messages of a step.
  int ring_source(int step) const { return (rank() - step + size()) % size(); }
  // The attention blocks of step s: this rank's query chunk i against ring_source(s)'s key chunk j,
  // the queries q_pos0 positions after the keys' first (kernels::AttentionShape): a full block
  // where the keys' chunk comes first, the causal diagonal where it is the queries' own, none where
  // it comes after.
  struct RingBlock {
    int query_chunk, key_chunk, q_pos0;
  };
  std::vector<RingBlock> ring_blocks(int step) const;
  void send_to_next(kernels::Buf data, std::size_t bytes);
  void receive_from_previous(kernels::Buf into, std::size_t bytes);
  void finish_sends();  // waits for the sends started since the last call (their data may change then)
  // x (n F32 values) replaced by their maximum over the group: the amax of a tensor split by tokens.
  void max_over_group(kernels::Buf x, std::int64_t n) { staged_.all_max(comm_, cp_, x, n); }

  // a2a: one tensor of the exchange between the sequence layout (this rank's [N, heads * D] rows,
  // chunk-major) and the head layout ([B, T, per_rank * D]: every position of the sequence, for
  // cp rank p's heads first(p) .. first(p) + per_rank - 1, with first(p) = p * spread / group,
  // so that kv heads follow the query heads they serve: per_rank = 1 and group > spread copies one
  // kv head to several ranks).
  struct HeadSplit {
    kernels::Buf sequence, heads;
    int all_heads = 1, per_rank = 1, spread = 1, group = 1;
    int first(int p) const { return p * spread / group; }
  };
  // Sequence layout into head layout, every tensor in one all-to-all. send and recv: staging of
  // N * D * sum(per_rank) elements per cp rank each.
  void to_heads(const std::vector<HeadSplit>& tensors, int head_dim, kernels::Buf send, kernels::Buf recv);
  // Head layout back into the sequence layout; a kv head's copies on several ranks are summed
  // (gradients).
  void to_sequence(const std::vector<HeadSplit>& tensors, int head_dim, kernels::Buf send, kernels::Buf recv);

 private:
  // Which of the 2 cp chunks rank r holds as its chunk j.
  int chunk_of(int r, int j) const { return j == 0 ? r : 2 * size() - 1 - r; }
  // Copies between sequence order and the staging's rank order ([cp][tensor][2, B, L, cols]).
  enum class Direction { ToStaging, FromStaging };
  void permute(const std::vector<kernels::Buf>& full, kernels::Buf staging, int cols, Direction dir) const;
  // The rows of cp rank r in the staging's rank order to or from sequence order.
  void copy_chunks(kernels::Buf full, kernels::Buf rows, int r, int cols, bool to_rows) const;
  void collective(kernels::Buf staging, std::int64_t chunk, bool gather);

  dist::Comm& comm_;
  const kernels::Ops& memory_;
  const dist::Group& cp_;
  int micro_batch_, seq_len_, chunk_len_;
  config::CpComm mode_;
  StagedCollectives staged_;
};

}  // namespace ptrain::parallel
