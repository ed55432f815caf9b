// Evaluation: the validation loss, over the first kBatches global batches of data.valid in file order
// (data::EvalLoader), forward only through this rank's pipeline stage.
//
// No evaluation costs a trained step. Every token any rank's evaluation reads is checked when it is
// made, on every rank alike: a bad one is bad input before the first step, not the end of the run at
// its first evaluation. And at each evaluation every rank reads its batches whole before any computes
// on them, and the ranks agree that each could: a token gone bad since (the file rewritten under the
// run) is met by all of them there, where they can still save the step just trained, rather than by
// one rank inside the evaluation's collectives; the evaluation itself reads no file.
#pragma once

#include <cstdint>
#include <exception>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"
#include "engine/data/batch_loader.h"
#include "engine/runtime/device_scalars.h"
#include "engine/train/pipeline_stage.h"

namespace ptrain::train {

class Evaluation {
 public:
  static constexpr int kBatches = 4;  // global batches of the validation set per evaluation

  // This rank's batches, read whole: [batch * microbatches + microbatch][micro_batch * T] each.
  struct Batches {
    std::vector<std::int32_t> inputs, targets;
  };

  // `valid`, `pipeline` and `comm` must outlive it; `holds_loss`: whether this rank's losses count in
  // the world's sum. Throws data::DataError for a bad token in any batch an evaluation reads.
  Evaluation(const config::JobSpec& spec, const data::TokenSource& valid, int dp_rank, PipelineStage& pipeline,
             dist::Comm& comm, bool holds_loss);

  // Reads this rank's batches into `batches`; the ranks agree (a collective). Null where every rank
  // could read its own; else the DataError where this rank met it, and one naming data.valid on the
  // others.
  std::exception_ptr read(Batches& batches) const;
  // The mean loss over every rank's tokens of `batches` (a collective); `loss_sums` holds at least
  // kBatches * microbatches values.
  double loss(const Batches& batches, const runtime::DeviceScalars& loss_sums) const;

 private:
  std::size_t microbatch_tokens() const;
  int slots() const { return loader_.num_batches() * loader_.microbatches(); }  // every batch's microbatches

  const config::JobSpec& spec_;
  data::EvalLoader loader_;
  PipelineStage& pipeline_;
  dist::Comm& comm_;
  bool holds_loss_;
};

}  // namespace ptrain::train
