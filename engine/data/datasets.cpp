#include "engine/data/datasets.h"

#include "engine/data/data_error.h"

#include "engine/data/llmc_dataset.h"
#include "engine/data/megatron_dataset.h"
#include "engine/data/synthetic_dataset.h"

namespace ptrain::data {

namespace {

std::unique_ptr<TokenSource> open_source(const config::JobSpec& job, const std::string& path,
                                         std::uint64_t synthetic_stream) {
  const int T = job.model.seq_len;
  const int V = job.model.vocab;
  switch (job.data.format) {
    case config::DataFormat::Llmc:
      return std::make_unique<LlmcDataset>(path, T, V);
    case config::DataFormat::Megatron:
      return std::make_unique<MegatronDataset>(path, T, V);
    case config::DataFormat::Synthetic:
      return std::make_unique<SyntheticDataset>(T, V, job.train.seed, synthetic_stream);
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<TokenSource> open_train_source(const config::JobSpec& job) {
  return open_source(job, job.data.train, SyntheticDataset::kTrainStream);
}

std::unique_ptr<TokenSource> open_valid_source(const config::JobSpec& job) {
  if (job.data.format != config::DataFormat::Synthetic && job.data.valid.empty()) return nullptr;
  return open_source(job, job.data.valid, SyntheticDataset::kValidStream);
}

std::vector<std::string> data_files(const config::DataSpec& data) {
  std::vector<std::string> files;
  for (const std::string& named : {data.train, data.valid}) {
    if (named.empty()) continue;
    switch (data.format) {
      case config::DataFormat::Synthetic:
        break;
      case config::DataFormat::Llmc:
        try {
          for (std::string& path : expand_glob(named)) files.push_back(std::move(path));
        } catch (const DataError&) {  // nothing matches: nothing to protect
        }
        break;
      case config::DataFormat::Megatron:
        files.insert(files.end(), {named + ".bin", named + ".idx"});
        break;
    }
  }
  return files;
}

BatchLoader make_train_loader(const config::JobSpec& job, const TokenSource& train, int dp_rank) {
  return BatchLoader(train, Sampler(train.num_samples(), job.train.seed, job.data.shuffle),
                     job.train.global_batch, job.train.micro_batch, dp_rank, job.parallel.dp);
}

EvalLoader make_eval_loader(const config::JobSpec& job, const TokenSource& valid, int dp_rank,
                            int eval_batches) {
  return EvalLoader(valid, eval_batches, job.train.global_batch, job.train.micro_batch, dp_rank,
                    job.parallel.dp);
}

}  // namespace ptrain::data
