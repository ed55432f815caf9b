// BatchLoader: this data-parallel rank's microbatches of each global batch; EvalLoader: the same
// over the validation set, in file order.
//
// The global batch of step k is positions [k*G, (k+1)*G) of the Sampler's order (G =
// global_batch). Data-parallel rank r of dp takes positions [r*G/dp, (r+1)*G/dp) of it, handed
// out as G / (micro_batch * dp) microbatches of micro_batch consecutive positions. A loader holds
// no cursor: any (step, microbatch) can be loaded at any time, so resuming needs only the step
// (or the consumed samples, which is what the checkpoint stores: consumed = step * G while G is
// fixed; load_microbatch_at takes consumed samples directly so a checkpoint stays valid if G
// changes). The order is independent of dp, micro_batch and every other parallel degree.
//
// Buffers are row-major [micro_batch, T] int32; loading is a convert-copy of T + 1 tokens per row
// from the mapped file, with no allocation.
#pragma once

#include <cstdint>

#include "engine/data/sampler.h"
#include "engine/data/token_source.h"

namespace ptrain::data {

class BatchLoader {
 public:
  // `source` must outlive the loader. Throws std::invalid_argument unless global_batch is a
  // multiple of micro_batch * dp, 0 <= dp_rank < dp, and the sampler covers source's samples.
  BatchLoader(const TokenSource& source, Sampler sampler, int global_batch, int micro_batch, int dp_rank,
              int dp);

  const TokenSource& source() const { return *source_; }
  const Sampler& sampler() const { return sampler_; }
  int seq_len() const { return seq_len_; }
  int global_batch() const { return global_batch_; }
  int micro_batch() const { return micro_batch_; }
  int microbatches() const { return microbatches_; }  // per rank per step
  int dp_rank() const { return dp_rank_; }
  int dp() const { return dp_; }

  // Samples consumed before step `step` (what a checkpoint records): step * global_batch.
  std::int64_t consumed_samples(std::int64_t step) const { return step * global_batch_; }
  // Order position of row `row` of microbatch `microbatch` in the global batch that starts after
  // `consumed` samples.
  std::int64_t position(std::int64_t consumed, int microbatch, int row) const;
  // Sample index of the same row.
  std::int64_t sample_index(std::int64_t consumed, int microbatch, int row) const;

  // Fills inputs and targets ([micro_batch, T] each) with microbatch `microbatch`
  // (0 <= microbatch < microbatches()) of step `step`. Throws DataError on a bad token.
  void load_microbatch(std::int64_t step, int microbatch, std::int32_t* inputs, std::int32_t* targets) const;
  // The same for the global batch that starts after `consumed_samples` samples.
  void load_microbatch_at(std::int64_t consumed_samples, int microbatch, std::int32_t* inputs,
                          std::int32_t* targets) const;

 private:
  const TokenSource* source_;
  Sampler sampler_;
  int seq_len_;
  int global_batch_;
  int micro_batch_;
  int dp_rank_;
  int dp_;
  int microbatches_;
};

// Validation batches: the validation source in file order (no shuffle), batch b = samples
// [b*G, (b+1)*G), sliced over dp ranks and microbatches exactly like training batches.
// num_batches() = min(eval_batches, max(1, S / G)): it never repeats a sample unless the set is
// smaller than one global batch (then the single batch wraps around the S samples).
class EvalLoader {
 public:
  EvalLoader(const TokenSource& source, int eval_batches, int global_batch, int micro_batch, int dp_rank,
             int dp);

  int num_batches() const { return num_batches_; }
  int microbatches() const { return loader_.microbatches(); }
  int micro_batch() const { return loader_.micro_batch(); }
  int seq_len() const { return loader_.seq_len(); }
  const BatchLoader& loader() const { return loader_; }

  // 0 <= batch < num_batches(), 0 <= microbatch < microbatches().
  void load_microbatch(int batch, int microbatch, std::int32_t* inputs, std::int32_t* targets) const;

 private:
  BatchLoader loader_;
  int num_batches_;
};

}  // namespace ptrain::data
