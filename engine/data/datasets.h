// The data pipeline from a JobSpec: opens data.train / data.valid in data.format and builds this
// data-parallel rank's loaders. Token ids are checked against model.vocab (not the TP-padded
// vocabulary), samples are model.seq_len + 1 tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/data/batch_loader.h"
#include "engine/data/token_source.h"

namespace ptrain::data {

// llmc: data.train is a glob of shards; megatron: a path prefix of .idx/.bin; synthetic:
// SyntheticDataset(train.seed, stream 0). Throws DataError for missing or malformed files.
std::unique_ptr<TokenSource> open_train_source(const config::JobSpec& job);
// data.valid read the same way; synthetic: the held-out stream 1 (always available). Returns
// nullptr when data.valid is empty for llmc/megatron.
std::unique_ptr<TokenSource> open_valid_source(const config::JobSpec& job);

// The files data.train and data.valid name (llmc: the glob's matches; megatron: <prefix>.bin and
// .idx; synthetic: none), those that exist; never throws.
std::vector<std::string> data_files(const config::DataSpec& data);

// Sampler(train.seed, data.shuffle) over `train`; train.global_batch, train.micro_batch, parallel.dp.
BatchLoader make_train_loader(const config::JobSpec& job, const TokenSource& train, int dp_rank);
// `eval_batches` global batches of the validation set, in file order.
EvalLoader make_eval_loader(const config::JobSpec& job, const TokenSource& valid, int dp_rank,
                            int eval_batches);

}  // namespace ptrain::data
