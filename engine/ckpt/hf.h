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

#include "engine/ckpt/hf_output.h"
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
// Writes the whole model held by `store` (one rank: tp = pp = ep = 1) as fp32 into `out`'s
// temporary directory, each file fsync'd, and publishes it (HfOutput::publish). std::invalid_argument
// if the store does not hold the whole model; CheckpointIoError if writing fails (a full disk), and
// CheckpointError where publish() refuses.
HfExportResult export_hf(const model::ParamStore& store, const config::ModelSpec& model, HfOutput& out);
// The same into `out_dir`, replacing an export there.
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
// import_hf's checks alone, reading no weight: `hf_dir` holds config.json and safetensors of `model`
// (each tensor's name, shape and dtype from the headers). CheckpointError (bad input) as import_hf.
void check_hf(const std::string& hf_dir, const config::ModelSpec& model);

}  // namespace ptrain::ckpt
