#include "engine/train/evaluation.h"

#include "engine/data/data_error.h"
#include "engine/data/datasets.h"

namespace ptrain::train {

Evaluation::Evaluation(const config::JobSpec& spec, const data::TokenSource& valid, int dp_rank,
                       PipelineStage& pipeline, dist::Comm& comm, bool holds_loss)
    : spec_(spec),
      loader_(data::make_eval_loader(spec, valid, dp_rank, kBatches)),
      pipeline_(pipeline),
      comm_(comm),
      holds_loss_(holds_loss) {
  loader_.check_tokens();
}

std::size_t Evaluation::microbatch_tokens() const {
  return static_cast<std::size_t>(loader_.micro_batch()) * static_cast<std::size_t>(loader_.seq_len());
}

std::exception_ptr Evaluation::read(Batches& batches) const {
  const std::size_t tokens = microbatch_tokens();
  batches.inputs.resize(static_cast<std::size_t>(slots()) * tokens);
  batches.targets.resize(batches.inputs.size());
  std::exception_ptr failure;
  try {
    std::size_t at = 0;
    for (int b = 0; b < loader_.num_batches(); ++b)
      for (int mb = 0; mb < loader_.microbatches(); ++mb, at += tokens)
        loader_.load_microbatch(b, mb, batches.inputs.data() + at, batches.targets.data() + at);
  } catch (const data::DataError&) {
    failure = std::current_exception();
  }
  std::int64_t failed = failure ? 1 : 0;
  comm_.all_reduce(comm_.world_group(), &failed, 1, dist::ReduceOp::Max);
  if (failed != 0 && !failure)
    failure = std::make_exception_ptr(data::DataError(spec_.data.valid, data::DataError::kNoOffset,
                                                      "another rank met a bad token in it (its error says where)"));
  return failure;
}

double Evaluation::loss(const Batches& batches, const runtime::DeviceScalars& loss_sums) const {
  const std::size_t tokens = microbatch_tokens();
  double sums[2] = {0, 0};  // loss sum, counted tokens
  for (int slot = 0; slot < slots(); ++slot) {
    const std::size_t at = static_cast<std::size_t>(slot) * tokens;
    const std::int64_t counted =
        pipeline_.evaluate(batches.inputs.data() + at, batches.targets.data() + at, loss_sums.at(slot));
    if (holds_loss_) sums[1] += static_cast<double>(counted);
  }
  sums[0] = holds_loss_ ? loss_sums.read_sum(slots()) : 0.0;
  comm_.all_reduce(comm_.world_group(), sums, 2);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace ptrain::train
