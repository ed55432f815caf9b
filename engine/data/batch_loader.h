// BatchLoader: this data-parallel rank's microbatches of each global batch; EvalLoader: the same
// over the validation set, in file order.
//
// The global batch of a step is the G positions of the Sampler's order (G = global_batch) after
// the samples consumed before it: k*G for step k of a run that started from scratch; after a
// resume, the checkpoint's consumed_samples plus G per step since (resume_at), so a run resumed
// with another global_batch goes on where the samples stopped. Data-parallel rank r of dp takes
// positions [r*G/dp, (r+1)*G/dp) of it, handed out as G / (micro_batch * dp) microbatches of
// micro_batch consecutive positions. A loader holds no cursor: any (step, microbatch) can be
// loaded at any time. The order is independent of dp, micro_batch and every other parallel degree.
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

  // Step `step` starts after `consumed` samples (a checkpoint's consumed_samples, which need not be
  // step * global_batch: the batch size may have changed since). std::invalid_argument if either
  // is negative.
  void resume_at(std::int64_t step, std::int64_t consumed);
  // Samples consumed before step `step` (what a checkpoint records): step * global_batch, or after
  // resume_at, the resumed count plus global_batch per step since. std::out_of_range for a step
  // before the resumed one.
  std::int64_t consumed_samples(std::int64_t step) const;
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
  std::int64_t resumed_step_ = 0;
  std::int64_t resumed_consumed_ = 0;
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
  // Reads every sample an evaluation reads on any data-parallel rank, as an evaluation reads it
  // (TokenSource::read_sample): DataError for the first bad token, naming the file and offset. Run
  // at start, so that a bad token ends the run before its first step, on every rank alike, rather
  // than at its first evaluation.
  void check_tokens() const;

 private:
  BatchLoader loader_;
  int num_batches_;
};

}  // namespace ptrain::data
