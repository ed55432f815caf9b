// Bridges between the engine's flat parameter/optimizer buffers and the checkpoint format: the
// shard list a rank saves, and restoring a rank's buffers from a checkpoint written by any layout
// (each element is fetched by its global flat index, in model::for_each_tp_block's order).
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

// A rank's flat shards (model::FlatShard): padding elements are neither saved nor restored.
using model::FlatShard;

// The tensors a rank saves for its flat shards. The shards point into the buffers, which must stay
// unchanged until the rank file is written. A dense tensor replicated over tp is saved by the rank
// of its first copy only (model::first_tp_copy); experts by every rank that holds a chunk of them.
std::vector<TensorShard> flat_shard_tensors(const model::ParamStore& store, const std::vector<FlatShard>& shards);

struct RestoreResult {
  std::int64_t tensors = 0;         // checkpoint tensors read
  bool optimizer_restored = false;  // false: the checkpoint has no optimizer state; moments were zeroed
};

// Fills the buffers of `shards` from `ckpt`, whatever layout wrote it. Every parameter must be
// present with the registry's global shape; the vocab-padded tensors (embedding, head) may differ
// in padding rows: rows both sides have are copied, the others zeroed. Missing or mismatched
// tensors are listed in one CheckpointError. A step 0 without any optimizer tensors (converted from
// HF) zero-fills the moments; a later step without them is a CheckpointError, where `shards` hold
// moments.
RestoreResult restore_flat_shards(LoadedCheckpoint& ckpt, const model::ParamStore& store,
                                  const std::vector<FlatShard>& shards);

// The whole store as one shard: its owned parameter buffer and, if given, full-size moments.
FlatShard whole_store(const model::ParamStore& store, float* exp_avg = nullptr, float* exp_avg_sq = nullptr);

// The job essentials recorded in a manifest: name, model dims, precision, seed, shuffle and layout.
nlohmann::json job_meta(const config::JobSpec& spec);

// Differences between a checkpoint's recorded model and the job's that change parameter shapes
// ("model.hidden: the checkpoint has 64, the job has 128"); empty when they agree.
std::vector<std::string> model_mismatches(const nlohmann::json& job_meta, const config::ModelSpec& model);

// Differences that leave the shapes alone, so the weights load, but change what the model computes:
// norm_eps, rope_theta, a Llama's seq_len, MoE's top_k, capacity_factor and aux_loss_coef
// ("model.rope_theta: the checkpoint has 10000.0, the job has 500000.0"). A resume says each (a
// context extension changes them on purpose; a typo does so silently). A key the checkpoint does
// not record is not a difference.
std::vector<std::string> model_changes(const nlohmann::json& job_meta, const config::ModelSpec& model);

// Differences in how the run trains from here: train.steps (the learning-rate schedule is laid over
// it), global_batch and grad_clip, every optimizer setting, and the data files ("optimizer.lr: the
// checkpoint has 0.0003, the job has 0.001"). A resume says each (raising train.steps to train on is
// common; a changed rate or data set should not go unsaid); a key the checkpoint does not record
// (written before 2026-11-28) is not a difference.
std::vector<std::string> training_changes(const nlohmann::json& job_meta, const config::JobSpec& spec);

// Differences in what orders the samples (train.seed, data.shuffle): the run goes on at the
// checkpoint's count of samples taken, but in another order, so some samples repeat and others are
// skipped. A resume says each; a key the checkpoint does not record is not a difference.
std::vector<std::string> data_order_changes(const nlohmann::json& job_meta, const config::JobSpec& spec);

// What a resume of `spec` from a checkpoint of `job_meta` says, one line each ("warning: ..." or, for
// a changed train.steps, "note: ..."): every model, training and sample-order change above, and
// what it does to the run.
std::vector<std::string> resume_messages(const nlohmann::json& job_meta, const config::JobSpec& spec);

}  // namespace ptrain::ckpt
