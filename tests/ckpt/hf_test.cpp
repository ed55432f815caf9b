#include "engine/ckpt/hf.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <limits>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/index_runs.h"
#include "engine/ckpt/safetensors.h"
#include "tests/ckpt/ckpt_test_util.h"

using namespace ptrain;
using namespace ptrain::ckpt;
using ckpt::testing::make_store;
using ckpt::testing::error_of;
using ckpt::testing::TempDir;
using ckpt::testing::tiny_gpt2;
using ckpt::testing::tiny_llama;
using ckpt::testing::tiny_mixtral;
using ckpt::testing::whole;
namespace fs = std::filesystem;

namespace {

// Rewrites <dir>/model.safetensors through `edit(name, values, shape) -> keep?`, e.g. to drop,
// rename or reshape tensors, or to store them as another dtype.
struct Rewrite {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
void rewrite_model(const std::string& dir, const std::function<bool(Rewrite&)>& edit,
                   StDtype dtype = StDtype::F32) {
  std::vector<Rewrite> tensors;
  {
    SafetensorsFile file(dir + "/model.safetensors");
    for (const StTensorInfo& t : file.tensors()) {
      Rewrite r{t.name, t.shape, std::vector<float>(static_cast<std::size_t>(t.numel()))};
      file.read_f32(t, r.values.data());
      if (edit(r)) tensors.push_back(std::move(r));
    }
  }
  std::vector<std::vector<std::uint16_t>> halves;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (const Rewrite& r : tensors) {
    if (dtype == StDtype::BF16) {
      halves.emplace_back();
      for (float v : r.values) halves.back().push_back(f32_to_bf16(v));
      w.add(r.name, StDtype::BF16, r.shape, halves.back().data(), halves.back().size() * 2);
    } else {
      w.add_f32(r.name, r.shape, r.values.data());
    }
  }
  w.write(dir + "/model.safetensors");
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(ckpt::testing::read_bytes(path));
}

// Every tensor of a whole-model store equals the one in `b`, except vocab padding rows of `b`,
// which must be zero.
void check_same_model(const model::ParamStore& a, const model::ParamStore& b, std::int64_t vocab) {
  for (const model::ParamSlot& s : a.slots()) {
    const std::string& name = s.local.info->name;
    INFO(name);
    std::vector<float> x = whole(a, name), y = whole(b, name);
    REQUIRE(x.size() == y.size());
    const bool vocab_table = s.local.info->tp_dim == 0 && s.local.info->shape.size() == 2 &&
                             s.local.info->placement != model::Placement::Layer;
    const std::size_t kept =
        vocab_table ? static_cast<std::size_t>(vocab * s.local.info->shape[1]) : x.size();
    CHECK(std::memcmp(x.data(), y.data(), kept * 4) == 0);
    CHECK(std::all_of(y.begin() + static_cast<std::ptrdiff_t>(kept), y.end(),
                      [](float v) { return v == 0.0f; }));
  }
}

}  // namespace

TEST_CASE("gpt2 export: HF names, Conv1D weights transposed, padding dropped, config.json", "[ckpt][hf]") {
  TempDir tmp;
  const config::ModelSpec m = tiny_gpt2();  // vocab 50, padded 52
  model::ParamStore store = make_store(m);
  const HfExportResult r = export_hf(store, m, tmp / "hf");
  CHECK(r.model_path == tmp / "hf/model.safetensors");
  CHECK(r.tensors == static_cast<std::int64_t>(store.registry().size()));

  SafetensorsFile file(r.model_path);
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.find("lm_head.weight") == nullptr);
  CHECK(file.get("wte.weight").shape == std::vector<std::int64_t>{50, 32});
  CHECK(file.get("wpe.weight").shape == std::vector<std::int64_t>{16, 32});
  CHECK(file.get("h.0.attn.c_attn.weight").shape == std::vector<std::int64_t>{32, 96});
  CHECK(file.get("h.0.attn.c_attn.bias").shape == std::vector<std::int64_t>{96});
  CHECK(file.get("h.1.mlp.c_fc.weight").shape == std::vector<std::int64_t>{32, 128});
  CHECK(file.get("h.1.mlp.c_proj.weight").shape == std::vector<std::int64_t>{128, 32});
  CHECK(file.get("ln_f.bias").shape == std::vector<std::int64_t>{32});

  // HF element [in=3, out=70] of c_attn is ptrain's [out=70, in=3].
  std::vector<float> hf(32 * 96);
  file.read_f32(file.get("h.0.attn.c_attn.weight"), hf.data());
  const std::vector<float> ours = whole(store, "h.0.attn.c_attn.weight");
  CHECK(hf[3 * 96 + 70] == ours[70 * 32 + 3]);
  CHECK(hf[3 * 96 + 70] != 0.0f);
  std::vector<float> fc(128 * 32);
  file.read_f32(file.get("h.1.mlp.c_proj.weight"), fc.data());  // HF [in=128, out=32]
  CHECK(fc[100 * 32 + 5] == whole(store, "h.1.mlp.c_proj.weight")[5 * 128 + 100]);

  const nlohmann::json cfg = read_json(r.config_path);
  CHECK(cfg["model_type"] == "gpt2");
  CHECK(cfg["architectures"] == nlohmann::json({"GPT2LMHeadModel"}));
  CHECK(cfg["n_embd"] == 32);
  CHECK(cfg["n_layer"] == 2);
  CHECK(cfg["n_head"] == 4);
  CHECK(cfg["n_positions"] == 16);
  CHECK(cfg["n_ctx"] == 16);
  CHECK(cfg["vocab_size"] == 50);
  CHECK(cfg["activation_function"] == "gelu_new");
  CHECK(cfg["tie_word_embeddings"] == true);
  CHECK(cfg["n_inner"].is_null());
  CHECK(hf_config_mismatches(cfg, m).empty());
}

TEST_CASE("gpt2 export and import round trip, with and without the transformer. prefix", "[ckpt][hf]") {
  TempDir tmp;
  const config::ModelSpec m = tiny_gpt2();
  model::ParamStore store = make_store(m, 0, 1, 21);
  export_hf(store, m, tmp.path());

  model::ParamStore back = make_store(m, 0, 1, 22);
  const HfImportResult r = import_hf(tmp.path(), m, back);
  CHECK(r.tensors == static_cast<std::int64_t>(store.registry().size()));
  check_same_model(store, back, m.vocab);

  // transformers' own GPT2LMHeadModel.save_pretrained writes "transformer."-prefixed keys plus
  // buffers and a tied lm_head: all accepted.
  rewrite_model(tmp.path(), [](Rewrite& t) {
    t.name = "transformer." + t.name;
    return true;
  });
  {
    SafetensorsFile file(tmp / "model.safetensors");
    CHECK(file.find("transformer.h.0.ln_1.weight") != nullptr);
  }
  model::ParamStore prefixed = make_store(m, 0, 1, 23);
  import_hf(tmp.path(), m, prefixed);
  check_same_model(store, prefixed, m.vocab);
}

TEST_CASE("llama and mixtral export and import round trip", "[ckpt][hf]") {
  for (const config::ModelSpec& m : {tiny_llama(false), tiny_llama(true), tiny_mixtral()}) {
    TempDir tmp;
    INFO(config::to_string(m.arch) << " tied " << m.tie_embeddings);
    model::ParamStore store = make_store(m, 0, 1, 31);
    export_hf(store, m, tmp.path());
    SafetensorsFile file(tmp / "model.safetensors");
    CHECK((file.find("lm_head.weight") != nullptr) == !m.tie_embeddings);
    CHECK(file.get("model.embed_tokens.weight").shape == std::vector<std::int64_t>{50, 32});
    const StTensorInfo& k = file.get("model.layers.1.self_attn.k_proj.weight");
    CHECK(k.shape == std::vector<std::int64_t>{16, 32});  // 2 kv heads of 8, [out, in] as in ptrain
    std::vector<float> kv(16 * 32);
    file.read_f32(k, kv.data());
    CHECK(kv[9 * 32 + 4] == whole(store, "model.layers.1.self_attn.k_proj.weight")[9 * 32 + 4]);
    if (!m.tie_embeddings) CHECK(file.get("lm_head.weight").shape == std::vector<std::int64_t>{50, 32});

    const nlohmann::json cfg = read_json(tmp / "config.json");
    CHECK(cfg["model_type"] == (m.arch == config::Arch::Mixtral ? "mixtral" : "llama"));
    CHECK(cfg["hidden_size"] == 32);
    CHECK(cfg["intermediate_size"] == 64);
    CHECK(cfg["num_attention_heads"] == 4);
    CHECK(cfg["num_key_value_heads"] == 2);
    CHECK(cfg["num_hidden_layers"] == 2);
    CHECK(cfg["vocab_size"] == 50);
    CHECK(cfg["tie_word_embeddings"] == m.tie_embeddings);
    CHECK(cfg["hidden_act"] == "silu");
    CHECK(hf_config_mismatches(cfg, m).empty());

    model::ParamStore back = make_store(m, 0, 1, 32);
    import_hf(tmp.path(), m, back);
    check_same_model(store, back, m.vocab);
  }
}

TEST_CASE("HF import fills a tp=2 rank's slices and converts bf16", "[ckpt][hf]") {
  TempDir tmp;
  config::ModelSpec m = tiny_llama();
  m.padded_vocab = 50;
  model::ParamStore full = make_store(m, 0, 1, 41);
  export_hf(full, m, tmp.path());
  model::ParamStore part = make_store(m, 1, 2, 42);
  import_hf(tmp.path(), m, part);
  model::ParamStore expected = make_store(m, 1, 2, 41);  // the same weights, initialised at tp=2
  for (const model::ParamSlot& s : part.slots()) {
    INFO(s.local.info->name);
    CHECK(std::memcmp(part.params() + s.offset, expected.params() + expected.slot(s.local.info->name).offset,
                      static_cast<std::size_t>(s.numel) * 4) == 0);
  }

  rewrite_model(
      tmp.path(), [](Rewrite&) { return true; }, StDtype::BF16);
  CHECK(SafetensorsFile(tmp / "model.safetensors").get("model.norm.weight").dtype == StDtype::BF16);
  model::ParamStore from_bf16 = make_store(m, 0, 1, 43);
  import_hf(tmp.path(), m, from_bf16);
  const std::vector<float> a = whole(full, "model.layers.0.mlp.up_proj.weight");
  const std::vector<float> b = whole(from_bf16, "model.layers.0.mlp.up_proj.weight");
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == bf16_to_f32(f32_to_bf16(a[i])));
}

TEST_CASE("HF import reports missing, misshapen and unexpected tensors and config mismatches", "[ckpt][hf]") {
  TempDir tmp;
  const config::ModelSpec m = tiny_gpt2();
  model::ParamStore store = make_store(m);
  export_hf(store, m, tmp.path());
  model::ParamStore target = make_store(m);
  auto import = [&] { import_hf(tmp.path(), m, target); };
  REQUIRE(error_of(import).empty());

  SECTION("missing, wrong shape, unexpected: all listed at once") {
    rewrite_model(tmp.path(), [](Rewrite& t) {
      if (t.name == "ln_f.bias") return false;
      if (t.name == "h.1.attn.c_proj.weight") t.shape = {16, 64};
      if (t.name == "h.0.ln_2.weight") t.name = "h.0.ln_3.weight";
      return true;
    });
    const std::string e = error_of(import);
    CHECK_THAT(e, Catch::Contains("missing tensors (2): h.0.ln_2.weight, ln_f.bias"));
    CHECK_THAT(e, Catch::Contains("h.1.attn.c_proj.weight is [16,64], expected [32,32]"));
    CHECK_THAT(e, Catch::Contains("unexpected tensors (1): h.0.ln_3.weight"));
  }
  SECTION("config.json dims that differ from the job name both values") {
    nlohmann::json cfg = read_json(tmp / "config.json");
    cfg["n_embd"] = 64;
    cfg["n_layer"] = "two";
    ckpt::testing::write_bytes(tmp / "config.json", cfg.dump());
    const std::string e = error_of(import);
    CHECK_THAT(e, Catch::Contains("config.json n_embd is 64, the job's model.hidden is 32"));
    CHECK_THAT(e, Catch::Contains("n_layer is \"two\", expected an integer"));
  }
  SECTION("another architecture") {
    nlohmann::json cfg = read_json(tmp / "config.json");
    cfg["model_type"] = "llama";
    ckpt::testing::write_bytes(tmp / "config.json", cfg.dump());
    CHECK_THAT(error_of(import),
               Catch::Contains("model_type is \"llama\"") && Catch::Contains("model.arch is gpt2"));
  }
  SECTION("no config.json, broken config.json, no weights") {
    ckpt::testing::write_bytes(tmp / "config.json", "{\"n_embd\": ");
    CHECK_THAT(error_of(import), Catch::Contains("invalid JSON"));
    fs::remove(tmp / "config.json");
    CHECK_THAT(error_of(import), Catch::Contains("no config.json"));
    CHECK_THAT(error_of([&] { import_hf(tmp / "nowhere", m, target); }),
               Catch::Contains("no such directory"));
    export_hf(store, m, tmp.path());
    fs::remove(tmp / "model.safetensors");
    CHECK_THAT(error_of(import), Catch::Contains("no model.safetensors"));
  }
  SECTION("more positions than the job uses are truncated, fewer are an error") {
    rewrite_model(tmp.path(), [](Rewrite& t) {
      if (t.name == "wpe.weight") {
        t.shape = {32, 32};
        t.values.resize(32 * 32, 0.5f);
      }
      return true;
    });
    nlohmann::json cfg = read_json(tmp / "config.json");
    cfg["n_positions"] = 32;
    ckpt::testing::write_bytes(tmp / "config.json", cfg.dump());
    const HfImportResult r = import_hf(tmp.path(), m, target);
    CHECK(whole(target, "wpe.weight") == whole(store, "wpe.weight"));
    CHECK_FALSE(r.notes.empty());
    cfg["n_positions"] = 8;
    ckpt::testing::write_bytes(tmp / "config.json", cfg.dump());
    CHECK_THAT(error_of(import), Catch::Contains("n_positions is 8, less than the job's model.seq_len 16"));
  }
}

TEST_CASE("HF import refuses NaN and infinite weights, naming the tensor", "[ckpt][hf]") {
  TempDir tmp;
  const config::ModelSpec m = tiny_gpt2();
  model::ParamStore store = make_store(m);
  model::ParamStore target = make_store(m);
  auto import = [&] { import_hf(tmp.path(), m, target); };
  for (const std::string name : {"h.0.attn.c_attn.weight", "ln_f.bias"}) {  // a transposed Conv1D weight, a plain one
    INFO(name);
    export_hf(store, m, tmp.path());
    rewrite_model(tmp.path(), [&](Rewrite& t) {
      if (t.name == name) t.values[5] = std::numeric_limits<float>::quiet_NaN();
      return true;
    });
    CHECK_THAT(error_of(import), Catch::Contains(tmp / "model.safetensors") &&
                                     Catch::Contains("tensor " + name + " holds NaN at element 5"));
  }
  // F16 +inf, as a model converted to half precision past its range holds it.
  export_hf(store, m, tmp.path());
  std::vector<Rewrite> all;
  rewrite_model(tmp.path(), [&](Rewrite& t) {
    all.push_back(t);
    return true;
  });
  SafetensorsWriter w;
  std::vector<std::uint16_t> halves;
  for (const Rewrite& t : all) {
    if (t.name != "wte.weight") {
      w.add_f32(t.name, t.shape, t.values.data());
      continue;
    }
    halves.assign(t.values.size(), 0x3C00);  // 1.0
    halves[7] = 0x7C00;                       // +inf
    w.add(t.name, StDtype::F16, t.shape, halves.data(), halves.size() * 2);
  }
  w.write(tmp / "model.safetensors");
  CHECK_THAT(error_of(import), Catch::Contains("tensor wte.weight holds an infinity at element 7"));
}

TEST_CASE("HF export into a path that cannot be a writable directory is bad input", "[ckpt][hf]") {
  TempDir tmp;
  const config::ModelSpec m = tiny_gpt2();
  const model::ParamStore store = make_store(m);
  ckpt::testing::write_bytes(tmp / "a-file", "x");
  CHECK_THAT(error_of([&] { export_hf(store, m, tmp / "a-file"); }), Catch::Contains("is not a directory"));
  CHECK_THAT(error_of([&] { export_hf(store, m, tmp / "a-file/hf"); }), Catch::Contains("cannot create"));
  fs::create_directories(tmp / "hf/config.json");
  CHECK_THAT(error_of([&] { export_hf(store, m, tmp / "hf"); }),
             Catch::Contains(tmp / "hf/config.json") && Catch::Contains("is a directory"));
}

TEST_CASE("HF import reads sharded checkpoints through model.safetensors.index.json", "[ckpt][hf]") {
  TempDir tmp;
  const config::ModelSpec m = tiny_llama();
  model::ParamStore store = make_store(m, 0, 1, 51);
  export_hf(store, m, tmp.path());
  // Split the export into two shards by layer.
  std::vector<Rewrite> all;
  rewrite_model(tmp.path(), [&](Rewrite& t) {
    all.push_back(t);
    return true;
  });
  nlohmann::json map = nlohmann::json::object();
  SafetensorsWriter a, b;
  for (const Rewrite& t : all) {
    const bool first = t.name.find("layers.1.") == std::string::npos;
    (first ? a : b).add_f32(t.name, t.shape, t.values.data());
    map[t.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  a.write(tmp / "model-00001-of-00002.safetensors");
  b.write(tmp / "model-00002-of-00002.safetensors");
  fs::remove(tmp / "model.safetensors");
  ckpt::testing::write_bytes(tmp / "model.safetensors.index.json",
                             nlohmann::json({{"weight_map", map}}).dump());
  model::ParamStore back = make_store(m, 0, 1, 52);
  import_hf(tmp.path(), m, back);
  check_same_model(store, back, m.vocab);

  auto import_with = [&](const nlohmann::json& edited) {
    ckpt::testing::write_bytes(tmp / "model.safetensors.index.json", nlohmann::json({{"weight_map", edited}}).dump());
    return error_of([&] { import_hf(tmp.path(), m, back); });
  };
  nlohmann::json evil = map;
  evil["model.norm.weight"] = "../evil.safetensors";
  CHECK_THAT(import_with(evil), Catch::Contains("bad file name"));

  // An index that does not describe its shards (two downloads mixed, a hand edit) is refused,
  // naming each tensor it misplaces, leaves out, or names but no shard holds.
  nlohmann::json misplaced = map, left_out = map, stray = map;
  misplaced["model.norm.weight"] = "model-00002-of-00002.safetensors";
  left_out.erase("model.layers.1.mlp.up_proj.weight");
  stray["model.layers.2.mlp.up_proj.weight"] = "model-00002-of-00002.safetensors";
  CHECK_THAT(import_with(misplaced),
             Catch::Contains("model.safetensors.index.json") && Catch::Contains("weight_map does not describe") &&
                 Catch::Contains("model.norm.weight (in model-00001-of-00002.safetensors; the index names "
                                 "model-00002-of-00002.safetensors)"));
  CHECK_THAT(import_with(left_out), Catch::Contains("model.layers.1.mlp.up_proj.weight (in "
                                                    "model-00002-of-00002.safetensors; not in the index)"));
  CHECK_THAT(import_with(stray), Catch::Contains("model.layers.2.mlp.up_proj.weight (in no shard; the index names "
                                                 "model-00002-of-00002.safetensors)"));
  CHECK(import_with(map).empty());

  // An export into this folder would leave readers two models: refused, nothing written.
  CHECK_THAT(error_of([&] { export_hf(back, m, tmp.path()); }),
             Catch::Contains(tmp / "model.safetensors.index.json") && Catch::Contains("names the shards of a model"));
  CHECK_FALSE(fs::exists(tmp / "model.safetensors"));
  // A folder holding both (made by hand) is read as transformers reads it: model.safetensors, saying
  // that the index is not read.
  model::ParamStore other = make_store(m, 0, 1, 53);
  fs::remove(tmp / "model.safetensors.index.json");
  export_hf(other, m, tmp.path());
  ckpt::testing::write_bytes(tmp / "model.safetensors.index.json", nlohmann::json({{"weight_map", map}}).dump());
  const HfImportResult both = import_hf(tmp.path(), m, back);
  check_same_model(other, back, m.vocab);
  REQUIRE(both.warnings.size() == 1);
  CHECK_THAT(both.warnings[0], Catch::Contains("model.safetensors.index.json is not read: model.safetensors beside it is"));
}

TEST_CASE("export needs the whole model", "[ckpt][hf]") {
  TempDir tmp;
  model::ParamStore part = make_store(tiny_llama(), 0, 2);
  CHECK_THROWS_AS(export_hf(part, tiny_llama(), tmp.path()), std::invalid_argument);
}
