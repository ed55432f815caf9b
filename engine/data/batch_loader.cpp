#include "engine/data/batch_loader.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace ptrain::data {

BatchLoader::BatchLoader(const TokenSource& source, Sampler sampler, int global_batch, int micro_batch,
                         int dp_rank, int dp)
    : source_(&source),
      sampler_(sampler),
      seq_len_(source.seq_len()),
      global_batch_(global_batch),
      micro_batch_(micro_batch),
      dp_rank_(dp_rank),
      dp_(dp),
      microbatches_(0) {
  if (global_batch < 1 || micro_batch < 1 || dp < 1 || dp_rank < 0 || dp_rank >= dp ||
      global_batch % (micro_batch * dp) != 0) {
    throw std::invalid_argument(
        "BatchLoader: need global_batch % (micro_batch * dp) == 0 and 0 <= dp_rank < dp; got "
        "global_batch " +
        std::to_string(global_batch) + ", micro_batch " + std::to_string(micro_batch) + ", dp_rank " +
        std::to_string(dp_rank) + ", dp " + std::to_string(dp));
  }
  if (sampler.num_samples() != source.num_samples()) {
    throw std::invalid_argument("BatchLoader: the sampler covers " + std::to_string(sampler.num_samples()) +
                                " samples, the source has " + std::to_string(source.num_samples()));
  }
  microbatches_ = global_batch / (micro_batch * dp);
}

void BatchLoader::resume_at(std::int64_t step, std::int64_t consumed) {
  if (step < 0 || consumed < 0)
    throw std::invalid_argument("BatchLoader: cannot resume at step " + std::to_string(step) + " after " +
                                std::to_string(consumed) + " samples");
  resumed_step_ = step;
  resumed_consumed_ = consumed;
}

std::int64_t BatchLoader::consumed_samples(std::int64_t step) const {
  if (step < resumed_step_)
    throw std::out_of_range("BatchLoader: step " + std::to_string(step) + " is before step " +
                            std::to_string(resumed_step_) + ", where the run resumed");
  return resumed_consumed_ + (step - resumed_step_) * global_batch_;
}

std::int64_t BatchLoader::position(std::int64_t consumed, int microbatch, int row) const {
  if (microbatch < 0 || microbatch >= microbatches_ || row < 0 || row >= micro_batch_) {
    throw std::out_of_range("BatchLoader: microbatch " + std::to_string(microbatch) + " row " +
                            std::to_string(row) + " outside [0, " + std::to_string(microbatches_) +
                            ") x [0, " + std::to_string(micro_batch_) + ")");
  }
  const std::int64_t per_rank = global_batch_ / dp_;
  return consumed + std::int64_t{dp_rank_} * per_rank + std::int64_t{microbatch} * micro_batch_ + row;
}

std::int64_t BatchLoader::sample_index(std::int64_t consumed, int microbatch, int row) const {
  return sampler_.sample_at(position(consumed, microbatch, row));
}

void BatchLoader::load_microbatch(std::int64_t step, int microbatch, std::int32_t* inputs,
                                  std::int32_t* targets) const {
  load_microbatch_at(consumed_samples(step), microbatch, inputs, targets);
}

void BatchLoader::load_microbatch_at(std::int64_t consumed_samples, int microbatch, std::int32_t* inputs,
                                     std::int32_t* targets) const {
  for (int row = 0; row < micro_batch_; ++row) {
    const std::int64_t offset = std::int64_t{row} * seq_len_;
    source_->read_sample(sample_index(consumed_samples, microbatch, row), inputs + offset, targets + offset);
  }
}

namespace {

int eval_batch_count(const TokenSource& source, int eval_batches, int global_batch) {
  if (eval_batches < 1) throw std::invalid_argument("EvalLoader: eval_batches must be >= 1");
  const std::int64_t full = std::max<std::int64_t>(1, source.num_samples() / std::max(global_batch, 1));
  return static_cast<int>(std::min<std::int64_t>(eval_batches, full));
}

}  // namespace

EvalLoader::EvalLoader(const TokenSource& source, int eval_batches, int global_batch, int micro_batch,
                       int dp_rank, int dp)
    : loader_(source, Sampler(source.num_samples(), 0, false), global_batch, micro_batch, dp_rank, dp),
      num_batches_(eval_batch_count(source, eval_batches, global_batch)) {}

void EvalLoader::load_microbatch(int batch, int microbatch, std::int32_t* inputs,
                                 std::int32_t* targets) const {
  if (batch < 0 || batch >= num_batches_) {
    throw std::out_of_range("EvalLoader: batch " + std::to_string(batch) + " outside [0, " +
                            std::to_string(num_batches_) + ")");
  }
  loader_.load_microbatch(batch, microbatch, inputs, targets);
}

void EvalLoader::check_tokens() const {
  // In file order every rank's batches together are samples [0, num_batches * G), wrapped around S.
  const TokenSource& source = loader_.source();
  const std::int64_t read =
      std::min(std::int64_t{num_batches_} * loader_.global_batch(), source.num_samples());
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(seq_len())), targets(inputs.size());
  for (std::int64_t sample = 0; sample < read; ++sample) source.read_sample(sample, inputs.data(), targets.data());
}

}  // namespace ptrain::data
