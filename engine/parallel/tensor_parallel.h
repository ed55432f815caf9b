// Tensor parallelism's communication (Megatron-LM): the tp group's collectives at the points where
// one rank's partial results meet the others'. The model calls it (model/transformer.cpp); which
// tensors are split how is the parameter registry's business.
//
//  - sum_partials: a row-parallel product is a partial sum over the ranks' slices of its inner
//    dimension. Forward: the attention and MLP output projections, the vocab-parallel embedding.
//    Backward: the input gradients of the column-parallel layers (q/k/v, MLP up/gate, the LM head).
//    Every rank ends with the same sum, so what follows (norms, residuals) runs replicated.
//  - Under sequence parallelism the residual stream between those layers is split by tokens
//    instead: sum_scatter (reduce-scatter) replaces the sum, each rank keeping its tokens' part, and
//    gather_chunks (all-gather) rebuilds the full-token input of a column-parallel layer (and, in
//    backward, the full-token gradient of a row-parallel one). reduce_tokens and gather_tokens are
//    those two steps of the residual stream, with or without sequence parallelism.
//  - A row-parallel layer's bias is replicated: tp rank 0 adds it, before the sum (row_parallel_bias).
//  - gather_chunks also collects the vocab-parallel cross-entropy's per-shard statistics.
//  - kv copies: with fewer kv heads than tp ranks, each kv head's projections are replicated on the
//    tp / kv_heads consecutive ranks that share it (param_registry.h). Their k/v output gradients
//    are summed over those ranks (sum_kv_copies), so the copies' weight gradients agree, and only
//    the first copy passes its k/v input gradient on (first_kv_copy), so the tp sum counts it once.
//
// Buffers are in `memory`'s device; a Comm that cannot reach it (Gloo with ranks sharing a GPU)
// works on host copies (StagedCollectives).
#pragma once

#include <cstdint>

#include "engine/comm/comm.h"
#include "engine/parallel/staged_collectives.h"
#include "kernels/buffer.h"
#include "kernels/ops.h"

namespace ptrain::parallel {

class TensorParallel {
 public:
  // `kv_copies`: this rank's group of ranks sharing a kv head (nullptr when every rank has its own);
  // `sequence_parallel`: the residual stream is split by tokens over the group (parallel.sequence_parallel).
  TensorParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& tp,
                 const dist::Group* kv_copies, bool sequence_parallel = false);

  int rank() const { return tp_.index; }
  int size() const { return tp_.size(); }
  bool first_kv_copy() const { return kv_copies_ == nullptr || kv_copies_->index == 0; }
  bool sequence_parallel() const { return sequence_parallel_; }

  // The residual stream after a row-parallel layer: the partial sums in `full` (every token) summed
  // over the group; under sequence parallelism this rank's part of the sum (`mine` elements,
  // reduce-scattered in place), else all of it (all-reduced). Returns where the result is.
  kernels::Buf reduce_tokens(kernels::Buf full, std::int64_t mine);
  // The input of a column-parallel layer: the full-token tensor of which `mine` is this rank's part
  // (`n` elements), all-gathered into `full` under sequence parallelism, else `mine` itself.
  kernels::Buf gather_tokens(kernels::Buf mine, kernels::Buf full, std::int64_t n);
  // A row-parallel layer's replicated bias, for this rank to add before the sum: tp rank 0's only.
  kernels::Buf row_parallel_bias(kernels::Buf bias) const { return rank() == 0 ? bias : kernels::Buf{}; }

  // x (n elements, F32 or BF16) summed over the tp group, in place.
  void sum_partials(kernels::Buf x, std::int64_t n);
  // chunks: size() chunks of `chunk` elements (F32 or BF16); fills each from the rank of its index.
  void gather_chunks(kernels::Buf chunks, std::int64_t chunk);
  // chunks: as above; chunk rank() becomes the sum over the tp group of every rank's chunk rank().
  void sum_scatter(kernels::Buf chunks, std::int64_t chunk);
  // x (n elements) summed over the ranks sharing this rank's kv head; nothing without kv copies.
  void sum_kv_copies(kernels::Buf x, std::int64_t n);
  // x (n F32 values) replaced by their maximum over the group: the amax of a tensor the ranks split.
  void max_over_group(kernels::Buf x, std::int64_t n) { staged_.all_max(comm_, tp_, x, n); }

 private:
  dist::Comm& comm_;
  const kernels::Ops& memory_;
  const dist::Group& tp_;
  const dist::Group* kv_copies_;
  bool sequence_parallel_;
  StagedCollectives staged_;
};

}  // namespace ptrain::parallel
