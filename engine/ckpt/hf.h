// Hugging Face import/export: a whole model as <dir>/model.safetensors + <dir>/config.json, loadable
// by transformers' GPT2LMHeadModel, LlamaForCausalLM and MixtralForCausalLM.
//
// Names are the registry's (HF names). GPT-2's linear layers are HF Conv1D modules, stored [in, out]:
// export transposes ptrain's [out, in] and import transposes back; GPT-2 has no lm_head (tied to
// wte). Llama keeps [out, in] and HF's rotate-half RoPE ordering of q/k, which ptrain uses as well;
// lm_head.weight is written unless the embeddings are tied. Vocabulary padding rows (padded_vocab >
// vocab) are dropped on export and zero-filled on import.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/param_store.h"

namespace ptrain::ckpt {

// The config.json transformers needs for `model`.
nlohmann::json hf_config(const config::ModelSpec& model);

// Every way an HF config.json disagrees with the job's model ("config.json n_embd is 768, the job's
// model.hidden is 128"); empty when it fits. Wrong types and unsupported features (rope_scaling,
// biases in Llama, another activation) are listed too.
std::vector<std::string> hf_config_mismatches(const nlohmann::json& config, const config::ModelSpec& model);

struct HfExportResult {
  std::string model_path, config_path;
  std::int64_t tensors = 0;
  std::int64_t bytes = 0;  // of model.safetensors
};
// Checks that an export can go to `out_dir` (named `role` in messages), creating it if needed:
// CheckpointError (bad input) if it is not a directory this process can create and write, holds a
// directory by a file's name, or holds a sharded model (model.safetensors.index.json), whose shards
// readers would take instead of (ptrain) or beside (transformers) the exported model.safetensors.
void prepare_hf_output(const std::string& out_dir, const std::string& role);
// Writes the whole model held by `store` (one rank: tp = pp = ep = 1) as fp32, where
// prepare_hf_output allows it. Each file is written to a temporary name, fsync'd and renamed.
// std::invalid_argument if the store does not hold the whole model; CheckpointIoError if writing
// fails (a full disk).
HfExportResult export_hf(const model::ParamStore& store, const config::ModelSpec& model,
                         const std::string& out_dir);

struct HfImportResult {
  std::int64_t tensors = 0;        // HF tensors used
  std::vector<std::string> notes;  // tensors ignored on purpose, truncated position tables
  std::vector<std::string> warnings;  // files passed over (an index beside model.safetensors)
};
// Reads <hf_dir>/config.json and model.safetensors (or the shards of model.safetensors.index.json)
// and fills this rank's slice of every parameter in `store`, in any layout. Accepts F32, BF16 and
// F16 tensors and GPT-2 keys with or without the "transformer." prefix. A config that does not
// match `model`, missing, unexpected or misshapen tensors are reported together in one
// CheckpointError.
HfImportResult import_hf(const std::string& hf_dir, const config::ModelSpec& model, model::ParamStore& store);

}  // namespace ptrain::ckpt
