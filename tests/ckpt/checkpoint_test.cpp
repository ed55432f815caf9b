#include "engine/ckpt/checkpoint.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/crc32c.h"
#include "tests/param_indices.h"
#include "engine/ckpt/file_io.h"
#include "engine/ckpt/index_runs.h"
#include "engine/ckpt/manifest.h"
#include "engine/ckpt/param_checkpoint.h"
#include "tests/ckpt/ckpt_test_util.h"

using namespace ptrain;
using namespace ptrain::ckpt;
using ckpt::testing::make_store;
using ckpt::testing::error_of;
using ckpt::testing::TempDir;
using ckpt::testing::tiny_gpt2;
using ckpt::testing::tiny_llama;
using ckpt::testing::tiny_mixtral;
namespace fs = std::filesystem;

namespace {

// Moments with distinct values in every slot (padding left at zero).
struct Moments {
  std::vector<float> m, v;
  explicit Moments(const model::ParamStore& store, float salt = 0.0f)
      : m(static_cast<std::size_t>(store.numel())), v(m.size()) {
    for (const model::ParamSlot& s : store.slots()) {
      for (std::int64_t i = 0; i < s.numel; ++i) {
        const auto k = static_cast<std::size_t>(s.offset + i);
        m[k] = std::sin(static_cast<float>(k) + salt);
        v[k] = std::cos(static_cast<float>(k) * 0.5f + salt) + 2.0f;
      }
    }
  }
  FlatShard whole(const model::ParamStore& store) { return whole_store(store, m.data(), v.data()); }
};

bool same_slots(const model::ParamStore& a, const model::ParamStore& b) {
  for (const model::ParamSlot& s : a.slots()) {
    const model::ParamSlot& t = b.slot(s.local.info->name);
    if (s.numel != t.numel ||
        std::memcmp(a.params() + s.offset, b.params() + t.offset, static_cast<std::size_t>(s.numel) * 4) != 0)
      return false;
  }
  return true;
}

bool same_moment_slots(const model::ParamStore& store, const std::vector<float>& a,
                       const std::vector<float>& b) {
  for (const model::ParamSlot& s : store.slots())
    if (std::memcmp(a.data() + s.offset, b.data() + s.offset, static_cast<std::size_t>(s.numel) * 4) != 0)
      return false;
  return true;
}

nlohmann::json sample_state(std::int64_t step) {
  return {{"step", step},
          {"consumed_samples", step * 16},
          {"rng", {{"seed", 1234}, {"offset", 99}}},
          {"lr_step", step}};
}

nlohmann::json sample_meta(const config::ModelSpec& m) {
  config::JobSpec spec;
  spec.model = m;
  return job_meta(spec);
}

std::string save_store(const std::string& dir, std::int64_t step, model::ParamStore& store, Moments* moments,
                       int keep = 0) {
  const FlatShard shard = moments ? moments->whole(store) : whole_store(store);
  return save_checkpoint(dir, step, sample_meta(tiny_llama()), sample_state(step), flat_shard_tensors(store, {shard}),
                         keep);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("index runs: merge, slice, expand, json", "[ckpt][runs]") {
  IndexRuns runs;
  append_range(runs, 0, 4);
  append_range(runs, 4, 4);  // contiguous: merged
  CHECK(runs == IndexRuns{{0, 8, 0, 1}});
  append_range(runs, 20, 8);  // same length: a strided run
  append_range(runs, 40, 8);
  CHECK(runs == IndexRuns{{0, 8, 20, 3}});
  append_range(runs, 100, 3);
  CHECK(runs.size() == 2);
  CHECK(runs_numel(runs) == 27);

  const std::vector<std::int64_t> idx = expand_runs(runs);
  CHECK(runs_from_indices(idx) == runs);
  for (std::int64_t first : {0l, 3l, 8l, 10l, 23l, 26l}) {
    for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{5}, 27 - first}) {
      if (first + count > 27) continue;
      const std::vector<std::int64_t> want(idx.begin() + first, idx.begin() + first + count);
      CHECK(expand_runs(slice_runs(runs, first, count)) == want);
    }
  }
  CHECK(runs_from_json(runs_to_json(runs), 103, "m", "r") == runs);
  CHECK_THROWS_AS(runs_from_json(runs_to_json(runs), 102, "m", "r"), CheckpointError);  // past the end
  CHECK_THROWS_AS(runs_from_json(nlohmann::json::parse("[[0,8,4,2]]"), 100, "m", "r"),
                  CheckpointError);  // overlap
  CHECK_THROWS_AS(runs_from_json(nlohmann::json::parse("[[0,-1]]"), 100, "m", "r"), CheckpointError);
  CHECK_THROWS_AS(runs_from_json(nlohmann::json::parse("[[0,1,2]]"), 100, "m", "r"), CheckpointError);
  CHECK_THROWS_AS(
      runs_from_json(nlohmann::json::parse("[[9223372036854775807,1,9223372036854775807,3]]"), 100, "m", "r"),
      CheckpointError);
  // Empty blocks, as many as a 64-bit count holds: every reader walked each of them (a resume spun for
  // years, its stop signals unanswered).
  CHECK_THAT(error_of([] { runs_from_json(nlohmann::json::parse("[[0,0,0,4611686018427387904]]"), 100, "m", "r"); }),
             Catch::Contains("has length 0"));
  CHECK_THROWS_AS(runs_from_json(nlohmann::json::parse("[[5,0]]"), 100, "m", "r"), CheckpointError);
}

TEST_CASE("param_runs lists exactly the elements of the rank blocks for every layout", "[ckpt][runs]") {
  for (const config::ModelSpec& m : {tiny_gpt2(), tiny_llama(), tiny_mixtral()}) {
    for (const model::ParamInfo& info : model::build_registry(m)) {
      for (int tp : {1, 2, 4}) {
        for (int r = 0; r < tp; ++r) {
          INFO(info.name << " tp " << tp << " rank " << r);
          const IndexRuns runs = param_runs(info, r, tp);
          CHECK(expand_runs(runs) == test::global_indices(info, r, tp));
          CHECK(runs.size() <= 3);  // compact: at most one run per fused part
        }
      }
    }
  }
}

TEST_CASE("checkpoint round trip of parameters, moments and state is bitwise", "[ckpt][checkpoint]") {
  TempDir tmp;
  for (const config::ModelSpec& m : {tiny_gpt2(), tiny_llama(true), tiny_mixtral()}) {
    model::ParamStore store = make_store(m, 0, 1, 11);
    Moments moments(store);
    const std::string dir = tmp / config::to_string(m.arch);
    const std::string path =
        save_checkpoint(dir, 42, sample_meta(m), sample_state(42), flat_shard_tensors(store, {moments.whole(store)}), 3);
    CHECK(path == dir + "/step_42");

    LoadedCheckpoint ckpt = open_checkpoint(dir);
    CHECK(ckpt.path() == path);
    CHECK(ckpt.step() == 42);
    CHECK(ckpt.state() == sample_state(42));
    CHECK(ckpt.job_meta() == sample_meta(m));
    CHECK(ckpt.has_tensor("model/" + store.registry().front().name));
    ckpt.verify();

    model::ParamStore fresh = make_store(m, 0, 1, 999);
    CHECK_FALSE(same_slots(store, fresh));
    Moments restored(fresh, 5.0f);
    const RestoreResult r = restore_flat_shards(ckpt, fresh, {restored.whole(fresh)});
    CHECK(r.optimizer_restored);
    CHECK(r.tensors == 3 * static_cast<std::int64_t>(store.slots().size()));
    CHECK(same_slots(store, fresh));
    CHECK(same_moment_slots(store, moments.m, restored.m));
    CHECK(same_moment_slots(store, moments.v, restored.v));
  }
}

TEST_CASE("manifest records layout-free tensors, files and checksums", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  const std::string path = save_store(tmp.path(), 3, store, nullptr);
  LoadedCheckpoint ckpt(path);
  const nlohmann::json& m = ckpt.manifest();
  CHECK(m["format"] == "ptrain-checkpoint");
  CHECK(m["version"] == 2);
  CHECK(ckpt.warnings().empty());
  // The first line is the checksum of the rest of the file (manifest.h); the file is plain JSON.
  const std::string text = ckpt::testing::read_bytes(path + "/manifest.json");
  const std::size_t newline = text.find('\n');
  CHECK(text.substr(0, newline) == "{\"manifest_crc32c\": \"" +
                                       crc32c_hex(crc32c(text.data() + newline + 1, text.size() - newline - 1)) +
                                       "\",");
  CHECK(nlohmann::json::parse(text) == m);
  CHECK(m["files"].size() == 1);
  CHECK(m["files"][0]["file"] == "rank_0.safetensors");
  CHECK(m["files"][0]["crc32c"].get<std::string>().size() == 8);
  const nlohmann::json& q = m["tensors"]["model/model.layers.0.self_attn.q_proj.weight"];
  CHECK(q["shape"] == nlohmann::json({32, 32}));
  CHECK(q["pieces"][0]["runs"] == nlohmann::json::parse("[[0, 1024]]"));
  CHECK(ckpt.job_meta()["layout"]["tp"] == 1);
  CHECK(ckpt.read_tensor("model/model.norm.weight") == std::vector<float>(32, 1.0f));
}

TEST_CASE("latest, keep-N pruning and leftovers of crashed saves", "[ckpt][checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  CHECK_FALSE(latest_checkpoint(dir).has_value());
  CHECK_THROWS_AS(open_checkpoint(dir), CheckpointError);

  fs::create_directories(dir + "/notes");
  fs::create_directories(dir + "/step_x");
  for (int step = 1; step <= 5; ++step) save_store(dir, step * 10, store, nullptr, /*keep=*/2);
  CHECK(entries(dir) == std::vector<std::string>{"latest", "notes", "step_40", "step_50", "step_x"});
  CHECK(ckpt::testing::read_bytes(dir + "/latest") == "step_50\n");
  CHECK(latest_checkpoint(dir) == dir + "/step_50");

  // A crash mid-save leaves a temporary directory: ignored by loading, removed by the next save.
  fs::create_directories(dir + "/step_60.tmp-0123456789abcdef");
  ckpt::testing::write_bytes(dir + "/step_60.tmp-0123456789abcdef/rank_0.safetensors", "partial");
  ckpt::testing::write_bytes(dir + "/latest.tmp-deadbeef", "step_6");
  CHECK(latest_checkpoint(dir) == dir + "/step_50");
  CHECK(open_checkpoint(dir).step() == 50);
  save_store(dir, 60, store, nullptr, 2);
  CHECK(entries(dir) == std::vector<std::string>{"latest", "notes", "step_50", "step_60", "step_x"});

  // `latest` naming a missing step: the newest complete one is used.
  ckpt::testing::write_bytes(dir + "/latest", "step_70\n");
  CHECK(latest_checkpoint(dir) == dir + "/step_60");
  ckpt::testing::write_bytes(dir + "/latest", "../../etc\n");
  CHECK(latest_checkpoint(dir) == dir + "/step_60");
  // A step directory without a manifest is not a checkpoint.
  fs::create_directories(dir + "/step_99");
  CHECK(latest_checkpoint(dir) == dir + "/step_60");

  // Saving the same step again replaces it; keep = 0 keeps everything.
  save_store(dir, 60, store, nullptr, 0);
  save_store(dir, 70, store, nullptr, 0);
  CHECK(entries(dir) ==
        std::vector<std::string>{"latest", "notes", "step_50", "step_60", "step_70", "step_99", "step_x"});
  CHECK(LoadedCheckpoint(dir + "/step_60").step() == 60);
}

TEST_CASE("corrupt and truncated checkpoints are detected", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_gpt2(), 0, 1);
  Moments moments(store);
  const std::string path = save_store(tmp.path(), 1, store, &moments);
  const std::string rank_file = path + "/rank_0.safetensors";
  const std::string original = ckpt::testing::read_bytes(rank_file);
  auto restore = [&] {
    LoadedCheckpoint ckpt = open_checkpoint(path);
    model::ParamStore target = make_store(tiny_gpt2(), 0, 1);
    restore_flat_shards(ckpt, target, {whole_store(target)});
  };
  REQUIRE(error_of(restore).empty());

  SECTION("a flipped byte fails the checksum, naming the file") {
    std::string bad = original;
    bad[bad.size() - 100] ^= 0x01;
    ckpt::testing::write_bytes(rank_file, bad);
    CHECK_THAT(error_of(restore),
               Catch::Contains("rank_0.safetensors") && Catch::Contains("checksum mismatch"));
    CHECK_THROWS_AS(open_checkpoint(path).verify(), CheckpointError);
  }
  SECTION("a truncated file is reported with both sizes") {
    ckpt::testing::write_bytes(rank_file, original.substr(0, original.size() / 2));
    CHECK_THAT(error_of(restore), Catch::Contains("rank_0.safetensors") && Catch::Contains("truncated"));
  }
  SECTION("a missing file") {
    fs::remove(rank_file);
    CHECK_THAT(error_of(restore), Catch::Contains("rank_0.safetensors") && Catch::Contains("cannot open"));
  }
  SECTION("a broken manifest") {
    const std::string manifest = ckpt::testing::read_bytes(path + "/manifest.json");
    ckpt::testing::write_bytes(path + "/manifest.json", manifest.substr(0, manifest.size() / 2));
    CHECK_THAT(error_of(restore), Catch::Contains("manifest.json") && Catch::Contains("checksum mismatch"));
    const std::string cut = manifest.substr(manifest.find('\n') + 1, manifest.size() / 2);  // its checksum right
    ckpt::testing::write_bytes(path + "/manifest.json",
                               "{\"manifest_crc32c\": \"" + crc32c_hex(crc32c(cut.data(), cut.size())) + "\",\n" + cut);
    CHECK_THAT(error_of(restore), Catch::Contains("manifest.json") && Catch::Contains("invalid JSON"));
    // Edited with a valid checksum, so that the check under test is the one that fails.
    auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
      nlohmann::json m = nlohmann::json::parse(manifest);
      m.erase(kManifestChecksumKey);
      edit(m);
      ckpt::testing::write_bytes(path + "/manifest.json", manifest_text(m));
    };
    rewrite([](nlohmann::json& m) {
      m["tensors"]["model/wte.weight"]["pieces"][0]["runs"] = nlohmann::json::parse("[[0, 99999999]]");
    });
    CHECK_THAT(error_of(restore), Catch::Contains("past the end of the tensor"));
    rewrite([](nlohmann::json& m) { m["files"][0]["file"] = "../../etc/passwd"; });
    CHECK_THAT(error_of(restore), Catch::Contains("bad file name"));
    rewrite([](nlohmann::json& m) { m["version"] = 3; });
    CHECK_THAT(error_of(restore), Catch::Contains("version 3 is not supported"));
    rewrite([](nlohmann::json& m) { m["tensors"]["model/wte.weight"]["pieces"] = nlohmann::json::array(); });
    CHECK_THAT(error_of(restore), Catch::Contains("are in no file"));
    rewrite([](nlohmann::json& m) { m["state"]["step"] = "one"; });
    CHECK_THAT(error_of(restore), Catch::Contains("manifest.json: state.step: expected an integer, found \"one\""));
    rewrite([](nlohmann::json& m) { m["state"]["step"] = 0; });
    CHECK_THAT(error_of(restore), Catch::Contains("manifest.json: state.step is 0 but the manifest is of step 1"));
    rewrite([](nlohmann::json& m) { m["step"] = 2; });
    CHECK_THAT(error_of(restore), Catch::Contains("step is 2 but the directory is named step_1"));
    // The whole file rewritten by a JSON tool: the checksum is no longer on the first line.
    ckpt::testing::write_bytes(path + "/manifest.json", nlohmann::json::parse(manifest).dump(2));
    CHECK_THAT(error_of(restore), Catch::Contains("manifest_crc32c is not on the first line"));
    // A version 2 manifest without its checksum line.
    nlohmann::json m = nlohmann::json::parse(manifest);
    m.erase(kManifestChecksumKey);
    ckpt::testing::write_bytes(path + "/manifest.json", m.dump());
    CHECK_THAT(error_of(restore), Catch::Contains("checksum line") && Catch::Contains("missing"));
  }
}

TEST_CASE("an edited manifest fails its checksum, naming the file", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  const std::string path = save_store(tmp.path(), 4, store, nullptr);
  const std::string manifest_path = path + "/manifest.json";
  const std::string text = ckpt::testing::read_bytes(manifest_path);
  // state.step 4 -> 3, as in an editor: still valid JSON, the same length.
  const std::string from = "\"lr_step\": 4,\n  \"rng\": {\n   \"offset\": 99,\n   \"seed\": 1234\n  },\n  \"step\": 4";
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  std::string edited = text;
  edited[at + from.size() - 1] = '3';
  ckpt::testing::write_bytes(manifest_path, edited);
  CHECK_THAT(error_of([&] { LoadedCheckpoint{path}; }),
             Catch::Contains(manifest_path) && Catch::Contains("checksum mismatch"));
}

TEST_CASE("a manifest written before the checksum (version 1) loads, with a warning", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  const std::string path = save_store(tmp.path(), 4, store, nullptr);
  // As ptrain wrote it at version 1: the same members without the checksum, dump(1), a newline.
  nlohmann::json m = nlohmann::json::parse(ckpt::testing::read_bytes(path + "/manifest.json"));
  m.erase(kManifestChecksumKey);
  m["version"] = 1;
  ckpt::testing::write_bytes(path + "/manifest.json", m.dump(1) + "\n");
  LoadedCheckpoint ckpt(path);
  CHECK(ckpt.step() == 4);
  REQUIRE(ckpt.warnings().size() == 1);
  CHECK_THAT(ckpt.warnings()[0], Catch::Contains("manifest.json") && Catch::Contains("format version 1"));
  model::ParamStore target = make_store(tiny_llama(), 0, 1, 99);
  restore_flat_shards(ckpt, target, {whole_store(target)});
  CHECK(same_slots(store, target));
  // Its members are checked all the same.
  m["state"]["step"] = 3;
  ckpt::testing::write_bytes(path + "/manifest.json", m.dump(1) + "\n");
  CHECK_THAT(error_of([&] { LoadedCheckpoint{path}; }), Catch::Contains("state.step is 3"));
  // A tensor's dtype must be what its file stores (it was read as the file said, whatever this said).
  m["state"]["step"] = 4;
  m["tensors"]["model/model.norm.weight"]["dtype"] = "BF16";
  ckpt::testing::write_bytes(path + "/manifest.json", m.dump(1) + "\n");
  LoadedCheckpoint edited(path);
  CHECK_THAT(error_of([&] { restore_flat_shards(edited, target, {whole_store(target)}); }),
             Catch::Contains("has dtype F32; the manifest says model/model.norm.weight is BF16"));
}

TEST_CASE("finding the latest checkpoint says what it passes over and why", "[ckpt][checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.path();
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  for (int step : {2, 4, 6}) save_store(dir, step, store, nullptr);
  auto found = [&](std::vector<std::string>& warnings) {
    warnings.clear();
    return latest_checkpoint(dir, &warnings).value_or("none");
  };
  std::vector<std::string> w;
  CHECK(found(w) == dir + "/step_6");
  CHECK(w.empty());
  CHECK(step_directories(dir) == std::vector<std::int64_t>{6, 4, 2});
  CHECK(step_directories(dir + "/nowhere").empty());

  // The newest manifest deleted: step_4, and a warning naming step_6 and why.
  fs::remove(dir + "/step_6/manifest.json");
  CHECK(found(w) == dir + "/step_4");
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "skipping " + dir + "/step_6: no manifest.json in it (a damaged checkpoint, or a save that did not finish)");

  // `latest` naming an older complete step than one that exists (a crash before `latest` was replaced).
  save_store(dir, 8, store, nullptr);
  ckpt::testing::write_bytes(dir + "/latest", "step_4\n");
  CHECK(found(w) == dir + "/step_4");
  REQUIRE(w.size() == 2);
  CHECK_THAT(w[0], Catch::StartsWith("skipping " + dir + "/step_8: it is newer than step_4, which `latest` names"));
  CHECK_THAT(w[1], Catch::StartsWith("skipping " + dir + "/step_6: no manifest.json"));

  // `latest` naming nothing usable.
  ckpt::testing::write_bytes(dir + "/latest", "step_10\n");
  CHECK(found(w) == dir + "/step_8");
  CHECK(w == std::vector<std::string>{dir + "/latest names step_10, which does not exist: ignored"});
  ckpt::testing::write_bytes(dir + "/latest", "../../etc\n");
  CHECK(found(w) == dir + "/step_8");
  CHECK(w == std::vector<std::string>{dir + "/latest does not name a step directory: ignored"});
  fs::remove_all(dir + "/step_8");
  fs::remove_all(dir + "/step_4");
  fs::remove_all(dir + "/step_2");
  CHECK(found(w) == "none");
  CHECK(w.size() == 2);  // `latest`, and step_6 without its manifest
  std::vector<std::string> opened;
  CHECK_THROWS_AS(open_checkpoint(dir, &opened), CheckpointError);
  CHECK(opened == w);
}

TEST_CASE("state.consumed_samples, where the data resumes, is refused where no run could take it",
          "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  // A step_4 checkpoint whose state.consumed_samples is `consumed` (null: absent).
  auto saved = [&](const nlohmann::json& consumed) {
    nlohmann::json state = sample_state(4);
    if (consumed.is_null()) state.erase("consumed_samples");
    else state["consumed_samples"] = consumed;
    fs::remove_all(tmp / "ckpt");
    return LoadedCheckpoint(save_checkpoint(tmp / "ckpt", 4, sample_meta(tiny_llama()), state,
                                            flat_shard_tensors(store, {whole_store(store)}), 0));
  };
  auto refusal = [&](const nlohmann::json& consumed) { return error_of([&] { saved(consumed).consumed_samples(); }); };
  CHECK(saved(64).consumed_samples() == 64);
  CHECK(saved(4).consumed_samples() == 4);  // a sample a step
  const std::int64_t most = 4 * std::int64_t{2147483647};  // the largest global_batch each step
  CHECK(saved(most).consumed_samples() == most);
  for (const std::int64_t bad : {std::int64_t{-32}, std::int64_t{3}, most + 1}) {
    INFO(bad);
    CHECK_THAT(refusal(bad), Catch::Contains(tmp / "ckpt/step_4/manifest.json") &&
                                 Catch::Contains("consumed_samples is " + std::to_string(bad) + ", which 4 steps"));
  }
  CHECK_THAT(refusal("many"), Catch::Contains("state.consumed_samples: expected an integer"));
  CHECK_THAT(refusal(nullptr), Catch::Contains("state.consumed_samples: missing"));
}

TEST_CASE("a failed write leaves no partial file behind", "[ckpt][checkpoint]") {
  // Files may not grow past 4 KiB: write() fails with EFBIG (SIGXFSZ ignored), as on a full disk.
  struct FileSizeLimit {
    rlimit saved{};
    void (*handler)(int) = nullptr;
    FileSizeLimit() {
      handler = std::signal(SIGXFSZ, SIG_IGN);
      ::getrlimit(RLIMIT_FSIZE, &saved);
      rlimit small = saved;
      small.rlim_cur = 4096;
      ::setrlimit(RLIMIT_FSIZE, &small);
    }
    ~FileSizeLimit() {
      ::setrlimit(RLIMIT_FSIZE, &saved);
      std::signal(SIGXFSZ, handler);
    }
  };
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  const std::string tmp_dir = begin_checkpoint(tmp.path(), 1);
  {
    FileSizeLimit limit;
    CHECK_THROWS_AS(write_rank_file(tmp_dir, 0, 1, flat_shard_tensors(store, {whole_store(store)})),
                    CheckpointIoError);
    CHECK_THROWS_AS(write_file_atomically(tmp / "latest", std::string(8192, 'x')), CheckpointIoError);
  }
  CHECK(entries(tmp_dir).empty());
  CHECK(entries(tmp.path()) == std::vector<std::string>{fs::path(tmp_dir).filename().string()});
}

TEST_CASE("a save whose `latest` cannot be replaced leaves the directory as it was", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  save_store(tmp.path(), 2, store, nullptr);
  fs::remove(tmp / "latest");
  fs::create_directories(tmp / "latest/blocked");  // rename() onto a non-empty directory fails
  CHECK_THROWS_AS(save_store(tmp.path(), 4, store, nullptr), CheckpointIoError);
  CHECK(entries(tmp.path()) == std::vector<std::string>{"latest", "step_2"});
}

TEST_CASE("a checkpoint written at tp=1 loads into tp=2 and tp=4 ranks", "[ckpt][reshard]") {
  TempDir tmp;
  for (config::ModelSpec m : {tiny_gpt2(), tiny_llama(), tiny_mixtral()}) {
    m.vocab = 49;  // tp=1 pads nothing: 49 rows; tp=2 pads to 50, tp=4 to 52
    m.padded_vocab = 49;
    model::ParamStore full = make_store(m, 0, 1, 3);
    Moments moments(full);
    const std::string dir = tmp / config::to_string(m.arch);
    nlohmann::json meta = sample_meta(m);
    save_checkpoint(dir, 1, meta, {}, flat_shard_tensors(full, {moments.whole(full)}), 0);

    for (int tp : {2, 4}) {
      config::ModelSpec mt = m;
      mt.padded_vocab = (m.vocab + tp - 1) / tp * tp;
      for (int rank = 0; rank < tp; ++rank) {
        INFO(config::to_string(m.arch) << " tp " << tp << " rank " << rank);
        model::ParamStore part = make_store(mt, rank, tp, 1000);
        Moments pm(part, 3.0f);
        LoadedCheckpoint ckpt = open_checkpoint(dir);
        CHECK(restore_flat_shards(ckpt, part, {pm.whole(part)}).optimizer_restored);
        for (const model::ParamSlot& s : part.slots()) {
          const model::ParamInfo& info = *s.local.info;
          const model::ParamSlot& fs_ = full.slot(info.name);
          const std::vector<std::int64_t> idx = test::global_indices(info, rank, tp);
          for (std::int64_t i = 0; i < s.numel; ++i) {
            const std::int64_t g = idx[static_cast<std::size_t>(i)];
            const bool padding = g >= fs_.numel;  // rows beyond the saved vocab
            const float want_p = padding ? 0.0f : full.params()[fs_.offset + g];
            const float want_m = padding ? 0.0f : moments.m[static_cast<std::size_t>(fs_.offset + g)];
            if (part.params()[s.offset + i] != want_p ||
                pm.m[static_cast<std::size_t>(s.offset + i)] != want_m) {
              FAIL_CHECK(info.name << " element " << i << " (global " << g << ") differs");
              break;
            }
          }
        }
      }
    }
  }
}

TEST_CASE("tp=2 ranks and ZeRO-sharded moments written as separate files load into tp=1", "[ckpt][reshard]") {
  TempDir tmp;
  config::ModelSpec m = tiny_llama();
  m.padded_vocab = 50;
  // Layout independence: both tp=2 ranks initialise their slices of the same full weights.
  model::ParamStore r0 = make_store(m, 0, 2, 5), r1 = make_store(m, 1, 2, 5);
  Moments m0(r0), m1(r1, 1.0f);
  // Rank files as four "ranks" would write them: tp rank x dp rank, the moments split in halves.
  const std::string tmp_dir = begin_checkpoint(tmp / "ckpt", 8);
  std::vector<RankFileInfo> infos;
  int rank = 0;
  for (auto [store, mom] : {std::pair{&r0, &m0}, std::pair{&r1, &m1}}) {
    const std::int64_t half = store->numel() / 2 + 3;  // splits a slot in the middle
    const FlatShard lo{{0, half}, store->params(), mom->m.data(), mom->v.data()};
    const FlatShard hi{{half, store->numel()}, store->params() + half, mom->m.data() + half, mom->v.data() + half};
    infos.push_back(write_rank_file(tmp_dir, rank++, 8, flat_shard_tensors(*store, {lo})));
    // As a distributed save would send it to rank 0.
    const RankFileInfo sent = write_rank_file(tmp_dir, rank++, 8, flat_shard_tensors(*store, {hi}));
    infos.push_back(rank_file_info_from_json(nlohmann::json::parse(to_json(sent).dump())));
  }
  const std::string path =
      commit_checkpoint(tmp / "ckpt", tmp_dir, 8, sample_meta(m), sample_state(8), infos);
  CHECK(LoadedCheckpoint(path).manifest()["files"].size() == 4);

  model::ParamStore full = make_store(m, 0, 1, 77);
  Moments fm(full, 9.0f);
  LoadedCheckpoint ckpt(path);
  restore_flat_shards(ckpt, full, {fm.whole(full)});
  CHECK(same_slots(full, make_store(m, 0, 1, 5)));  // the gathered slices are the full weights
  for (const auto& [store, mom] : {std::pair{&r0, &m0}, std::pair{&r1, &m1}}) {
    const int tp_rank = store->coords().tp_rank;
    for (const model::ParamSlot& s : store->slots()) {
      const model::ParamSlot& f = full.slot(s.local.info->name);
      const std::vector<std::int64_t> idx = test::global_indices(*s.local.info, tp_rank, 2);
      for (std::int64_t i = 0; i < s.numel; ++i) {
        const auto g = static_cast<std::size_t>(f.offset + idx[static_cast<std::size_t>(i)]);
        const auto l = static_cast<std::size_t>(s.offset + i);
        if (s.local.info->tp_dim >= 0 && (fm.m[g] != mom->m[l] || fm.v[g] != mom->v[l])) {
          FAIL_CHECK(s.local.info->name << " moment " << i << " differs");
          break;
        }
      }
    }
  }
}

TEST_CASE("commit refuses shard lists that leave elements uncovered", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore half = make_store(tiny_llama(), 0, 2);
  const std::string tmp_dir = begin_checkpoint(tmp.path(), 1);
  const RankFileInfo info = write_rank_file(tmp_dir, 0, 1, flat_shard_tensors(half, {whole_store(half)}));
  CHECK_THROWS_WITH(commit_checkpoint(tmp.path(), tmp_dir, 1, {}, {}, {info}),
                    Catch::Contains("held by no rank"));
  CHECK_FALSE(latest_checkpoint(tmp.path()).has_value());
}

TEST_CASE("restoring a different model lists what does not fit", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  save_store(tmp.path(), 1, store, nullptr);

  config::ModelSpec wider = tiny_llama();
  wider.ffn_hidden = 96;
  model::ParamStore other = make_store(wider, 0, 1);
  LoadedCheckpoint ckpt = open_checkpoint(tmp.path());
  const std::string e = error_of([&] { restore_flat_shards(ckpt, other, {whole_store(other)}); });
  CHECK_THAT(e, Catch::Contains("shape mismatches (6)") && Catch::Contains("mlp.gate_proj.weight") &&
                    Catch::Contains("[64,32]") && Catch::Contains("[96,32]"));

  model::ParamStore gpt = make_store(tiny_gpt2(), 0, 1);
  CHECK_THAT(error_of([&] { restore_flat_shards(ckpt, gpt, {whole_store(gpt)}); }),
             Catch::Contains("missing tensors") && Catch::Contains("model/wte.weight"));

  CHECK(model_mismatches(ckpt.job_meta(), tiny_llama()).empty());
  const std::vector<std::string> mm = model_mismatches(ckpt.job_meta(), wider);
  REQUIRE(mm.size() == 1);
  CHECK(mm[0] == "model.ffn_hidden: the checkpoint has 64, the job has 96");
}

TEST_CASE("a resume names the model settings that differ but leave the shapes alone", "[ckpt][checkpoint]") {
  const nlohmann::json saved = sample_meta(tiny_llama());
  CHECK(model_changes(saved, tiny_llama()).empty());
  config::ModelSpec longer = tiny_llama();
  longer.rope_theta = 500000.0;
  longer.seq_len = 64;
  longer.norm_eps = 1e-6;
  CHECK(model_mismatches(saved, longer).empty());  // it loads
  CHECK(model_changes(saved, longer) ==
        std::vector<std::string>{"model.norm_eps: the checkpoint has 1e-05, the job has 1e-06",
                                 "model.rope_theta: the checkpoint has 10000.0, the job has 500000.0",
                                 "model.seq_len: the checkpoint has 16, the job has 64"});
  // GPT-2's positions are learned: another seq_len is a mismatch, not a change; no rotary base.
  config::ModelSpec gpt = tiny_gpt2();
  config::ModelSpec gpt_eps = gpt;
  gpt_eps.norm_eps = 1e-3;
  gpt_eps.rope_theta = 7.0;
  CHECK(model_changes(sample_meta(gpt), gpt_eps) ==
        std::vector<std::string>{"model.norm_eps: the checkpoint has 1e-05, the job has 0.001"});
  // MoE routing: top_k, capacity and the aux loss change; the experts themselves do not.
  config::ModelSpec moe = tiny_mixtral();
  config::ModelSpec routed = moe;
  routed.moe->top_k = 1;
  routed.moe->capacity_factor = 2.0;
  CHECK(model_mismatches(sample_meta(moe), routed).empty());
  CHECK(model_changes(sample_meta(moe), routed).size() == 2);
  // An older manifest without these keys: nothing to compare, nothing said.
  nlohmann::json bare = saved;
  bare["model"].erase("rope_theta");
  CHECK(model_changes(bare, longer).size() == 2);
}

TEST_CASE("a checkpoint without optimizer state zero-fills the moments", "[ckpt][checkpoint]") {
  TempDir tmp;
  model::ParamStore store = make_store(tiny_llama(), 0, 1);
  save_store(tmp.path(), 0, store, nullptr);
  model::ParamStore target = make_store(tiny_llama(), 0, 1, 123);
  Moments mom(target, 1.0f);
  LoadedCheckpoint ckpt = open_checkpoint(tmp.path());
  CHECK_FALSE(restore_flat_shards(ckpt, target, {mom.whole(target)}).optimizer_restored);
  CHECK(same_slots(store, target));
  CHECK(std::all_of(mom.m.begin(), mom.m.end(), [](float x) { return x == 0.0f; }));
  CHECK(std::all_of(mom.v.begin(), mom.v.end(), [](float x) { return x == 0.0f; }));
  // A later step without them is a damaged run's: refused where the moments are wanted, not restarted
  // from zero in silence; its weights alone still read (convert --from).
  TempDir later;
  save_store(later.path(), 20, store, nullptr);
  LoadedCheckpoint step20 = open_checkpoint(later.path());
  CHECK_THAT(error_of([&] { restore_flat_shards(step20, target, {mom.whole(target)}); }),
             Catch::Contains("is step 20 of a run but holds no optimizer state"));
  CHECK_FALSE(restore_flat_shards(step20, target, {whole_store(target)}).optimizer_restored);
}
