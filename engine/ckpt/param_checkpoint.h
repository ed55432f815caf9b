// Bridges between the engine's flat parameter/optimizer buffers and the checkpoint format: the
// shard list a rank saves, and restoring a rank's buffers from a checkpoint written by any layout
// (each element is fetched by its global flat index, model::global_indices' order).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/ckpt/checkpoint.h"
#include "engine/config/job_spec.h"
#include "engine/model/param_store.h"

namespace ptrain::ckpt {

std::string model_tensor_name(const std::string& param);       // "model/<hf name>"
std::string exp_avg_tensor_name(const std::string& param);     // "optim/exp_avg/<hf name>"
std::string exp_avg_sq_tensor_name(const std::string& param);  // "optim/exp_avg_sq/<hf name>"

// AdamW's moments for the flat elements [flat_begin, flat_end) of a ParamStore (flat_end = -1: to
// the end). exp_avg[0] is the moment of flat element flat_begin, so both the full buffers of
// optim::AdamW and a ZeRO shard fit. Padding between slots is neither saved nor restored.
struct MomentBuffers {
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::int64_t flat_begin = 0;
  std::int64_t flat_end = -1;
};

// The tensors a rank saves: every parameter of `store` (if include_params; under data parallelism
// only one replica needs to) and, with `moments`, the moments of its range. The shards point into
// the buffers, which must stay unchanged until the rank file is written.
std::vector<TensorShard> param_store_shards(const model::ParamStore& store,
                                            const MomentBuffers* moments = nullptr,
                                            bool include_params = true);

struct RestoreResult {
  std::int64_t tensors = 0;         // checkpoint tensors read
  bool optimizer_restored = false;  // false: the checkpoint has no optimizer state; moments were zeroed
};

// Fills the parameters of `store` (and the moments in `moments`) from `ckpt`, whatever layout wrote
// it. Every parameter must be present with the registry's global shape; the vocab-padded tensors
// (embedding, head) may differ in padding rows: rows both sides have are copied, the others zeroed.
// Missing or mismatched tensors are listed in one CheckpointError. A checkpoint without any
// optimizer tensors (e.g. converted from HF) zero-fills the moments.
RestoreResult restore_param_store(LoadedCheckpoint& ckpt, model::ParamStore& store,
                                  const MomentBuffers* moments = nullptr);

// The job essentials recorded in a manifest: name, model dims, precision, seed and layout.
nlohmann::json job_meta(const config::JobSpec& spec);

// Differences between a checkpoint's recorded model and the job's that change parameter shapes
// ("model.hidden: the checkpoint has 64, the job has 128"); empty when they agree.
std::vector<std::string> model_mismatches(const nlohmann::json& job_meta, const config::ModelSpec& model);

}  // namespace ptrain::ckpt
