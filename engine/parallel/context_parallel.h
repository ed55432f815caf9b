// Context parallelism (parallel.cp > 1): the ranks of a cp group split each sequence.
//
// The T positions are cut into 2 cp chunks of L = T / (2 cp) positions; rank r holds chunks r and
// 2 cp - 1 - r, so that every rank does the same causal attention work (its early chunk sees few
// keys, its late chunk many; Megatron-LM's load balancing). A rank's N = B * 2L tokens are laid out
// chunk-major: token t of chunk j (0: the early one, 1: the late one) of sequence b is row
// (j B + b) L + t. Every token-wise layer (linear layers, norms, the MLP, the loss) runs on these
// rows like on any others; the positions (RoPE, GPT-2's learned positions) come from chunk_start.
//
// Attention needs every earlier key: each layer all-gathers k and v over the cp group into
// sequence order [B, T] (gather_sequences) and attends each of the rank's two query chunks to
// them (kernels::AttentionShape with q_pos0 = the chunk's start). Backward needs them again: the
// gathered copy is not kept per layer (it is the size of the whole sequence's k and v), so backward
// gathers again, unless full recompute's re-run forward just did. It computes d_k and d_v for the
// whole sequence and sums them over cp into each rank's own rows (sum_into_chunks). Per layer and
// microbatch that is one all-gather forward and one all-gather and one reduce-scatter in backward
// (and zb-h1's W, re-running forward under full recompute, gathers once more): what validate's comm
// model counts (plan/comm.cpp).
//
// Buffers are in `memory`'s device; a Comm that cannot reach it works on host copies (StagedCollectives).
#pragma once

#include <cstdint>

#include "engine/dist/comm.h"
#include "engine/parallel/staged_collectives.h"
#include "kernels/buffer.h"
#include "kernels/ops.h"

namespace ptrain::parallel {

class ContextParallel {
 public:
  // Throws std::invalid_argument unless seq_len is a multiple of 2 * cp.size() and this rank is in cp.
  ContextParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& cp, int micro_batch,
                  int seq_len);

  int rank() const { return cp_.index; }
  int size() const { return cp_.size(); }
  int micro_batch() const { return micro_batch_; }
  int seq_len() const { return seq_len_; }
  int chunk_len() const { return chunk_len_; }  // L
  // The first position of this rank's chunk j (0 or 1).
  int chunk_start(int j) const { return chunk_of(rank(), j) * chunk_len_; }

  // This rank's [2, B, L] rows of a [B, T] batch of token ids (host memory).
  void take_chunks(const std::int32_t* batch, std::int32_t* mine) const;
  // a and b: this rank's [N, cols] rows of two tensors (k and v); a_full and b_full receive every
  // rank's rows in sequence order, [B, T, cols]. staging: 2 B T cols elements of a's dtype.
  void gather_sequences(kernels::Buf a, kernels::Buf b, kernels::Buf a_full, kernels::Buf b_full,
                        kernels::Buf staging, int cols);
  // a_full and b_full: [B, T, cols] partial sums (d_k and d_v); a and b receive this rank's rows of
  // their sums over the cp group. staging as above.
  void sum_into_chunks(kernels::Buf a_full, kernels::Buf b_full, kernels::Buf a, kernels::Buf b,
                       kernels::Buf staging, int cols);

 private:
  // Which of the 2 cp chunks rank r holds as its chunk j.
  int chunk_of(int r, int j) const { return j == 0 ? r : 2 * size() - 1 - r; }
  // Copies between sequence order and the staging's rank order ([cp][2: a, b][2, B, L, cols]).
  enum class Direction { ToStaging, FromStaging };
  void permute(kernels::Buf a_full, kernels::Buf b_full, kernels::Buf staging, int cols, Direction dir) const;
  void collective(kernels::Buf staging, std::int64_t chunk, bool gather);

  dist::Comm& comm_;
  const kernels::Ops& memory_;
  const dist::Group& cp_;
  int micro_batch_, seq_len_, chunk_len_;
  StagedCollectives staged_;
};

}  // namespace ptrain::parallel
