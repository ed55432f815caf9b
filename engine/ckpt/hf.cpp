#include "engine/ckpt/hf.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/index_runs.h"
#include "engine/ckpt/safetensors.h"
#include "engine/ckpt/strict_json.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;
namespace {

using Shape = std::vector<std::int64_t>;
using config::Arch;

std::string shape_text(const Shape& shape) {
  return nlohmann::json(shape).dump();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HF GPT-2's Conv1D weights: every 2-D weight inside a block.
bool conv1d(const model::ParamInfo& info, Arch arch) {
  return arch == Arch::Gpt2 && info.shape.size() == 2 && info.placement == model::Placement::Layer;
}
bool vocab_table(const model::ParamInfo& info) {
  return info.tp_dim == 0 && info.shape.size() == 2 &&
         (info.placement == model::Placement::Embedding || info.placement == model::Placement::Head);
}

// The shape of a registry tensor in the HF file.
Shape hf_shape(const model::ParamInfo& info, const config::ModelSpec& m) {
  if (conv1d(info, m.arch)) return {info.shape[1], info.shape[0]};
  if (vocab_table(info)) return {m.vocab, info.shape[1]};
  return info.shape;
}

// [rows, cols] row-major -> [cols, rows] row-major.
void transpose(const float* in, std::int64_t rows, std::int64_t cols, float* out) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

// Whether one value of config.json equals what the job implies; records a message if not.
class ConfigCheck {
 public:
  ConfigCheck(const nlohmann::json& config, std::vector<std::string>& out) : config_(config), out_(out) {}

  const nlohmann::json* get(const char* key) const {
    auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? nullptr : &*it;
  }

  void integer(const char* key, std::int64_t want, const char* job_key,
               std::optional<std::int64_t> fallback = {}) {
    const nlohmann::json* v = get(key);
    std::int64_t have = 0;
    if (v == nullptr) {
      if (!fallback) return missing(key);
      have = *fallback;
    } else if (!json_int64(*v, have)) {
      return wrong_type(key, *v, "an integer");
    }
    if (have != want)
      out_.push_back("config.json " + std::string(key) + " is " + std::to_string(have) + ", the job's " +
                     job_key + " is " + std::to_string(want));
  }

  void real(const char* key, double want, const char* job_key, std::optional<double> fallback = {}) {
    const nlohmann::json* v = get(key);
    double have = 0;
    if (v == nullptr) {
      if (!fallback) return missing(key);
      have = *fallback;
    } else if (!v->is_number()) {
      return wrong_type(key, *v, "a number");
    } else {
      have = v->get<double>();
    }
    if (std::abs(have - want) > 1e-6 * std::max(std::abs(have), std::abs(want)))
      out_.push_back("config.json " + std::string(key) + " is " + nlohmann::json(have).dump() +
                     ", the job's " + job_key + " is " + nlohmann::json(want).dump());
  }

  void boolean(const char* key, bool want, const char* job_key, bool fallback) {
    const nlohmann::json* v = get(key);
    bool have = fallback;
    if (v != nullptr) {
      if (!v->is_boolean()) return wrong_type(key, *v, "true or false");
      have = v->get<bool>();
    }
    if (have != want)
      out_.push_back("config.json " + std::string(key) + " is " + (have ? "true" : "false") + ", the job's " +
                     job_key + " is " + (want ? "true" : "false"));
  }

  // A string that must be one of `allowed` (absent: `fallback`, if given).
  void one_of(const char* key, const std::vector<std::string>& allowed, const char* fallback = nullptr) {
    const nlohmann::json* v = get(key);
    std::string have;
    if (v == nullptr) {
      if (fallback == nullptr) return missing(key);
      have = fallback;
    } else if (!v->is_string()) {
      return wrong_type(key, *v, "a string");
    } else {
      have = v->get<std::string>();
    }
    if (std::find(allowed.begin(), allowed.end(), have) == allowed.end()) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : " or ") + ("\"" + a + "\"");
      out_.push_back("config.json " + std::string(key) + " is \"" + have + "\"; ptrain supports " + list);
    }
  }

  // Must be absent, null or false: a feature ptrain does not implement.
  void unsupported(const char* key, const char* what) {
    const nlohmann::json* v = get(key);
    if (v != nullptr && !(v->is_boolean() && !v->get<bool>()))
      out_.push_back("config.json " + std::string(key) + " is " + v->dump() + ": " + what +
                     " is not supported");
  }

 private:
  void missing(const char* key) { out_.push_back("config.json has no " + std::string(key)); }
  void wrong_type(const char* key, const nlohmann::json& v, const char* expected) {
    out_.push_back("config.json " + std::string(key) + " is " + v.dump() + ", expected " + expected);
  }

  const nlohmann::json& config_;
  std::vector<std::string>& out_;
};

// The HF tensors of a directory, by (normalised) name.
struct HfTensors {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<const SafetensorsFile*, const StTensorInfo*>> by_name;
  std::vector<std::string> duplicates;
  std::string ignored_index;  // an index beside model.safetensors, not read (shard_index)
};

// model.safetensors.index.json: each tensor's shard file (`file_of`, stored names), and the
// files in first-named order. Where there is a model.safetensors, that file alone, as transformers
// reads it first (an index beside it is `ignored`).
struct ShardIndex {
  std::string path;  // "" without an index
  std::string ignored;
  std::vector<std::string> files;
  std::map<std::string, std::string> file_of;
};

ShardIndex shard_index(const std::string& hf_dir) {
  std::error_code ec;
  ShardIndex out;
  const std::string index_path = join_path(hf_dir, "model.safetensors.index.json");
  // exists, not is_regular_file: a named pipe or a directory there is refused by name on reading.
  if (fs::exists(join_path(hf_dir, "model.safetensors"), ec)) {
    out.files = {"model.safetensors"};
    if (fs::exists(index_path, ec)) out.ignored = index_path;
    return out;
  }
  if (fs::exists(index_path, ec)) {
    const runtime::MappedFile bytes = map_file(index_path);
    const nlohmann::json index = parse_json_strict(
        std::string_view(reinterpret_cast<const char*>(bytes.bytes().data()), bytes.bytes().size()),
        index_path);
    const JsonReader r(index, index_path, "");
    out.path = index_path;
    const nlohmann::json& map = r.object("weight_map");
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->is_string()) r.fail("weight_map[\"" + it.key() + "\"] is not a file name");
      const std::string file = it->get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
        r.fail("weight_map[\"" + it.key() + "\"]: bad file name \"" + file + "\"");
      if (std::find(out.files.begin(), out.files.end(), file) == out.files.end()) out.files.push_back(file);
      out.file_of.emplace(it.key(), file);
    }
    return out;
  }
  throw CheckpointError(
      hf_dir,
      "no model.safetensors or model.safetensors.index.json (pytorch_model.bin is not read: "
      "convert it to safetensors first)");
}

std::string list_text(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < 12; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > 12) s += ", ... and " + std::to_string(items.size() - 12) + " more";
  return s;
}

// The index must say where each tensor is, as its shards hold them: an entry whose file lacks the
// tensor, or a tensor of a shard that the index leaves out or puts elsewhere, is a directory put
// together from more than one download (or an index edited by hand): refused, naming the index.
void check_index_matches_shards(const ShardIndex& index, const HfTensors& hf) {
  if (index.path.empty()) return;
  std::map<std::string, std::string> held;  // stored name -> the file holding it
  for (const auto& file : hf.files)
    for (const StTensorInfo& info : file->tensors())
      held.emplace(info.name, fs::path(file->path()).filename().string());
  std::vector<std::string> problems;
  for (const auto& [name, file] : index.file_of) {
    const auto it = held.find(name);
    if (it == held.end()) problems.push_back(name + " (in no shard; the index names " + file + ")");
    else if (it->second != file) problems.push_back(name + " (in " + it->second + "; the index names " + file + ")");
  }
  for (const auto& [name, file] : held)
    if (index.file_of.count(name) == 0) problems.push_back(name + " (in " + file + "; not in the index)");
  if (!problems.empty())
    throw CheckpointError(index.path, "weight_map does not describe the shards (" + std::to_string(problems.size()) +
                                          "): " + list_text(problems) +
                                          " (fix: download the checkpoint again, or correct the index)");
}

HfTensors open_hf_tensors(const std::string& hf_dir, Arch arch) {
  HfTensors t;
  const ShardIndex index = shard_index(hf_dir);
  t.ignored_index = index.ignored;
  for (const std::string& name : index.files) {
    t.files.push_back(std::make_unique<SafetensorsFile>(join_path(hf_dir, name)));
    const SafetensorsFile& file = *t.files.back();
    for (const StTensorInfo& info : file.tensors()) {
      std::string key = info.name;
      if (arch == Arch::Gpt2 && starts_with(key, "transformer.")) key = key.substr(12);
      if (!t.by_name.emplace(key, std::make_pair(&file, &info)).second) t.duplicates.push_back(info.name);
    }
  }
  check_index_matches_shards(index, t);
  return t;
}

// HF tensors that are not parameters (buffers) or are redundant (a tied head), skipped on import.
bool ignorable(const std::string& name, const config::ModelSpec& m) {
  if (m.arch == Arch::Gpt2)
    return (starts_with(name, "h.") &&
            (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"))) ||
           name == "lm_head.weight";
  return ends_with(name, ".rotary_emb.inv_freq") || (m.tie_embeddings && name == "lm_head.weight");
}

// A NaN or an infinity among imported weights (a damaged or badly converted file) would end the
// run at its first step with a non-finite loss: refused at import, naming the tensor. `first` is
// the file's flat index of values[0].
void check_finite(const float* values, std::int64_t count, std::int64_t first, const SafetensorsFile& file,
                  const StTensorInfo& tensor) {
  const float* bad = std::find_if(values, values + count, [](float v) { return !std::isfinite(v); });
  if (bad == values + count) return;
  throw CheckpointError(file.path(), "tensor " + tensor.name + " holds " + (std::isnan(*bad) ? "NaN" : "an infinity") +
                                         " at element " + std::to_string(first + (bad - values)) +
                                         ": non-finite weights are not imported (fix: export the model again)");
}

}  // namespace

nlohmann::json hf_config(const config::ModelSpec& m) {
  if (m.arch == Arch::Gpt2) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_embd", m.hidden},
            {"n_layer", m.layers},
            {"n_head", m.heads},
            {"n_inner", m.ffn_hidden == 4 * m.hidden ? nlohmann::json() : nlohmann::json(m.ffn_hidden)},
            {"n_positions", m.seq_len},
            {"n_ctx", m.seq_len},
            {"vocab_size", m.vocab},
            {"layer_norm_epsilon", m.norm_eps},
            {"activation_function", "gelu_new"},
            {"tie_word_embeddings", true},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"scale_attn_weights", true},
            {"initializer_range", 0.02},
            {"torch_dtype", "float32"}};
  }
  nlohmann::json c = {
      {"architectures", {m.arch == Arch::Mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", m.arch == Arch::Mixtral ? "mixtral" : "llama"},
      {"hidden_size", m.hidden},
      {"intermediate_size", m.ffn_hidden},
      {"num_attention_heads", m.heads},
      {"num_key_value_heads", m.kv_heads},
      {"num_hidden_layers", m.layers},
      {"head_dim", m.head_dim()},
      {"rms_norm_eps", m.norm_eps},
      {"rope_theta", m.rope_theta},
      {"rope_scaling", nullptr},
      {"vocab_size", m.vocab},
      {"max_position_embeddings", m.seq_len},
      {"tie_word_embeddings", m.tie_embeddings},
      {"hidden_act", "silu"},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"torch_dtype", "float32"}};
  if (m.arch == Arch::Mixtral) {
    c["num_local_experts"] = m.moe ? m.moe->experts : 0;
    c["num_experts_per_tok"] = m.moe ? m.moe->top_k : 0;
    c["router_aux_loss_coef"] = m.moe ? m.moe->aux_loss_coef : 0.0;
    c["sliding_window"] = nullptr;
  } else {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  return c;
}

std::vector<std::string> hf_config_mismatches(const nlohmann::json& cfg, const config::ModelSpec& m) {
  std::vector<std::string> out;
  if (!cfg.is_object()) return {"config.json is not a JSON object"};
  ConfigCheck c(cfg, out);
  const char* type = m.arch == Arch::Gpt2 ? "gpt2" : m.arch == Arch::Llama ? "llama" : "mixtral";
  c.one_of("model_type", {type});
  if (!out.empty()) {
    out.back() += " (the job's model.arch is " + std::string(config::to_string(m.arch)) + ")";
    return out;  // the other keys would all be noise
  }
  if (m.arch == Arch::Gpt2) {
    c.integer("n_embd", m.hidden, "model.hidden");
    c.integer("n_layer", m.layers, "model.layers");
    c.integer("n_head", m.heads, "model.heads");
    c.integer("n_inner", m.ffn_hidden, "model.ffn_hidden", 4 * std::int64_t{m.hidden});
    c.integer("vocab_size", m.vocab, "model.vocab");
    c.real("layer_norm_epsilon", m.norm_eps, "model.norm_eps", 1e-5);
    c.one_of("activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "gelu_new");
    c.boolean("tie_word_embeddings", true, "model.tie_embeddings (always true for gpt2)", true);
    std::int64_t positions = 0;
    const nlohmann::json* p = c.get("n_positions");
    if (p == nullptr || !json_int64(*p, positions)) {
      out.push_back("config.json n_positions is missing or not an integer");
    } else if (positions < m.seq_len) {
      out.push_back("config.json n_positions is " + std::to_string(positions) +
                    ", less than the job's model.seq_len " + std::to_string(m.seq_len));
    }
    return out;
  }
  c.integer("hidden_size", m.hidden, "model.hidden");
  c.integer("num_hidden_layers", m.layers, "model.layers");
  c.integer("num_attention_heads", m.heads, "model.heads");
  c.integer("num_key_value_heads", m.kv_heads, "model.kv_heads", m.heads);
  c.integer("intermediate_size", m.ffn_hidden, "model.ffn_hidden");
  c.integer("vocab_size", m.vocab, "model.vocab");
  c.integer("head_dim", m.head_dim(), "model.hidden / model.heads", m.head_dim());
  c.real("rms_norm_eps", m.norm_eps, "model.norm_eps");
  c.real("rope_theta", m.rope_theta, "model.rope_theta", 10000.0);
  c.boolean("tie_word_embeddings", m.tie_embeddings, "model.tie_embeddings", false);
  c.one_of("hidden_act", {"silu"}, "silu");
  c.unsupported("rope_scaling", "RoPE scaling");
  c.unsupported("attention_bias", "attention bias");
  c.unsupported("mlp_bias", "MLP bias");
  if (m.arch == Arch::Mixtral && m.moe) {
    c.integer("num_local_experts", m.moe->experts, "model.moe.experts");
    c.integer("num_experts_per_tok", m.moe->top_k, "model.moe.top_k");
    std::int64_t window = 0;
    const nlohmann::json* w = c.get("sliding_window");
    if (w != nullptr && (!json_int64(*w, window) || window < m.seq_len))
      out.push_back("config.json sliding_window is " + w->dump() +
                    ": sliding-window attention is not supported");
  }
  return out;
}

HfExportResult export_hf(const model::ParamStore& store, const config::ModelSpec& m, HfOutput& out) {
  for (const model::ParamInfo& info : store.registry()) {
    if (!store.contains(info.name) || store.slot(info.name).numel != info.numel())
      throw std::invalid_argument("export_hf needs the whole model on one rank; " + info.name +
                                  " is missing or sharded");
  }
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");        // transformers refuses safetensors files without it
  std::deque<std::vector<float>> transposed;  // kept alive until the file is written
  for (const model::ParamInfo& info : store.registry()) {
    const float* data = store.params() + store.slot(info.name).offset;
    Shape shape = hf_shape(info, m);
    if (conv1d(info, m.arch)) {
      transposed.emplace_back(static_cast<std::size_t>(info.numel()));
      transpose(data, info.shape[0], info.shape[1], transposed.back().data());
      data = transposed.back().data();
    }
    writer.add_f32(info.name, std::move(shape), data);  // vocab tables: the first `vocab` rows
  }
  HfExportResult result;
  result.model_path = join_path(out.dir(), HfOutput::kModelFile);
  result.config_path = join_path(out.dir(), HfOutput::kConfigFile);
  result.tensors = static_cast<std::int64_t>(store.registry().size());
  result.bytes = writer.write(join_path(out.staging(), HfOutput::kModelFile), /*sync=*/true).bytes;
  write_file_atomically(join_path(out.staging(), HfOutput::kConfigFile), hf_config(m).dump(2) + "\n");
  out.publish();
  return result;
}

HfExportResult export_hf(const model::ParamStore& store, const config::ModelSpec& m, const std::string& out_dir) {
  HfOutput out(out_dir, "the HF output directory", /*replace=*/true);
  return export_hf(store, m, out);
}

namespace {

// import_hf's checks, before a weight is read: the directory, its config.json against `m`, and every
// tensor of `registry` in the files' headers by name, shape and dtype. Notes and warnings go to
// `result`.
HfTensors open_matching_tensors(const std::string& hf_dir, const config::ModelSpec& m,
                                const std::vector<model::ParamInfo>& registry, HfImportResult& result) {
  std::error_code ec;
  if (!fs::is_directory(hf_dir, ec)) throw CheckpointError(hf_dir, "no such directory");
  const std::string config_path = join_path(hf_dir, "config.json");
  if (!fs::exists(config_path, ec)) throw CheckpointError(hf_dir, "no config.json");
  nlohmann::json cfg;
  {
    const runtime::MappedFile bytes = map_file(config_path);
    if (bytes.size() > (16 << 20)) throw CheckpointError(config_path, "larger than 16 MiB");
    cfg = parse_json_strict(
        std::string_view(reinterpret_cast<const char*>(bytes.bytes().data()), bytes.bytes().size()),
        config_path);
  }
  if (const std::vector<std::string> bad = hf_config_mismatches(cfg, m); !bad.empty()) {
    std::string message = "does not match the job's model: ";
    for (std::size_t i = 0; i < bad.size(); ++i) message += (i ? "; " : "") + bad[i];
    throw CheckpointError(config_path, message);
  }

  HfTensors hf = open_hf_tensors(hf_dir, m.arch);
  if (!hf.ignored_index.empty())
    result.warnings.push_back(hf.ignored_index + " is not read: model.safetensors beside it is, as transformers "
                              "reads it first (fix: remove the one that is not the model)");
  std::vector<std::string> missing, mismatched, unexpected;
  std::map<std::string, const model::ParamInfo*> expected;
  for (const model::ParamInfo& info : registry) expected.emplace(info.name, &info);
  for (const auto& [name, where] : hf.by_name) {
    if (expected.count(name) != 0) continue;
    if (ignorable(name, m)) {
      result.notes.push_back("ignored " + name);
    } else {
      unexpected.push_back(name);
    }
  }
  for (const model::ParamInfo& info : registry) {
    auto it = hf.by_name.find(info.name);
    if (it == hf.by_name.end()) {
      missing.push_back(info.name);
      continue;
    }
    const Shape want = hf_shape(info, m), have = it->second.second->shape;
    const bool positions_prefix = m.arch == Arch::Gpt2 && info.name == "wpe.weight" && have.size() == 2 &&
                                  have[1] == want[1] && have[0] >= want[0];
    if (have != want && !positions_prefix)
      mismatched.push_back(info.name + " is " + shape_text(have) + ", expected " + shape_text(want));
    if (have != want && positions_prefix)
      result.notes.push_back("wpe.weight: using the first " + std::to_string(want[0]) + " of " +
                             std::to_string(have[0]) + " positions");
    const StDtype dt = it->second.second->dtype;
    if (dt != StDtype::F32 && dt != StDtype::BF16 && dt != StDtype::F16)
      mismatched.push_back(info.name + " has dtype " + dtype_name(dt) + ", expected F32, BF16 or F16");
  }
  if (!missing.empty() || !mismatched.empty() || !unexpected.empty() || !hf.duplicates.empty()) {
    std::string message = "does not fit the job's model:";
    if (!missing.empty())
      message += " missing tensors (" + std::to_string(missing.size()) + "): " + list_text(missing) + ";";
    if (!mismatched.empty())
      message +=
          " mismatched tensors (" + std::to_string(mismatched.size()) + "): " + list_text(mismatched) + ";";
    if (!unexpected.empty())
      message +=
          " unexpected tensors (" + std::to_string(unexpected.size()) + "): " + list_text(unexpected) + ";";
    if (!hf.duplicates.empty())
      message += " tensors present twice (" + std::to_string(hf.duplicates.size()) +
                 "): " + list_text(hf.duplicates) + ";";
    message.pop_back();
    throw CheckpointError(hf_dir, message);
  }
  return hf;
}

}  // namespace

void check_hf(const std::string& hf_dir, const config::ModelSpec& model) {
  HfImportResult unused;
  open_matching_tensors(hf_dir, model, model::build_registry(model), unused);
}

HfImportResult import_hf(const std::string& hf_dir, const config::ModelSpec& m, model::ParamStore& store) {
  HfImportResult result;
  const HfTensors hf = open_matching_tensors(hf_dir, m, store.registry(), result);

  // Fill this rank's slice of every parameter, fetching elements by global flat index.
  const model::ShardCoords& coords = store.coords();
  for (const model::ParamSlot& slot : store.slots()) {
    const model::ParamInfo& info = *slot.local.info;
    const auto [file, tensor] = hf.by_name.at(info.name);
    const IndexRuns runs = param_runs(info, coords.tp_rank, coords.tp);
    float* out = store.params() + slot.offset;
    if (conv1d(info, m.arch)) {  // [in, out] in the file: transpose the whole tensor, then gather
      std::vector<float> hf_values(static_cast<std::size_t>(info.numel())), ours(hf_values.size());
      file->read_f32(*tensor, hf_values.data());
      check_finite(hf_values.data(), info.numel(), 0, *file, *tensor);
      transpose(hf_values.data(), info.shape[1], info.shape[0], ours.data());
      for_each_block(runs, [&](std::int64_t start, std::int64_t length, std::int64_t position) {
        std::copy_n(ours.data() + start, length, out + position);
      });
    } else {  // same layout; the file may hold fewer rows (vocab padding) or more (positions)
      const std::int64_t available = std::min(tensor->numel(), info.numel());
      for_each_block(runs, [&](std::int64_t start, std::int64_t length, std::int64_t position) {
        const std::int64_t kept = std::clamp<std::int64_t>(available - start, 0, length);
        if (kept > 0) {
          file->read_f32(*tensor, start, kept, out + position);
          check_finite(out + position, kept, start, *file, *tensor);
        }
        std::fill(out + position + kept, out + position + length, 0.0f);
      });
    }
    ++result.tensors;
  }
  return result;
}

}  // namespace ptrain::ckpt
