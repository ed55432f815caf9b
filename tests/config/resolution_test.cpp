// Good configs: every value read, every default kept, every derived field resolved, every key's
// position recorded.
#include <catch2/catch.hpp>

#include "engine/config/enum_values.h"
#include "tests/config/config_test_support.h"

namespace ptrain::config::testing {

TEST_CASE("a minimal job gets every default and the derived values", "[config][resolve]") {
  LoadResult result = load("name: tiny\n");
  REQUIRE(result.ok());
  CHECK(result.diags.warnings.empty());
  const JobSpec& spec = result.spec;
  CHECK(spec.name == "tiny");
  CHECK(spec.world == 1);
  CHECK(spec.parallel.dp == 1);
  CHECK(spec.parallel.dp_auto);
  CHECK(spec.model.arch == Arch::Gpt2);
  CHECK(spec.model.kv_heads == 12);
  CHECK(spec.model.ffn_hidden == 4 * 768);
  CHECK(spec.model.padded_vocab == 50257);
  CHECK(spec.model.tie_embeddings);  // gpt2 ties by definition
  CHECK_FALSE(spec.model.moe);
  CHECK(spec.schedule.resolved_layers_per_stage == std::vector<int>{12});
  CHECK(spec.train.microbatches == 8);
}

TEST_CASE("the design's example job loads with every key read", "[config][resolve]") {
  const std::string path = corpus_path("good/design-example.yaml");
  LoadResult result = load_file(path);
  CAPTURE(describe_all(result.diags));
  REQUIRE(result.ok());
  const JobSpec& s = result.spec;
  CHECK(s.name == "llama3-8b");
  CHECK(s.backend == Backend::Auto);
  CHECK(s.model.arch == Arch::Llama);
  CHECK(s.model.layers == 32);
  CHECK(s.model.hidden == 4096);
  CHECK(s.model.heads == 32);
  CHECK(s.model.kv_heads == 8);
  CHECK(s.model.ffn_hidden == 14336);
  CHECK(s.model.vocab == 128256);
  CHECK(s.model.padded_vocab == 128256);
  CHECK(s.model.seq_len == 8192);
  CHECK(s.model.norm_eps == 1.0e-5);
  CHECK(s.model.rope_theta == 500000.0);
  CHECK_FALSE(s.model.tie_embeddings);
  CHECK(s.parallel.tp == 8);
  CHECK(s.parallel.pp == 4);
  CHECK(s.parallel.cp == 1);
  CHECK(s.parallel.ep == 1);
  CHECK(s.parallel.dp_auto);
  CHECK(s.parallel.order == "tp-cp-ep-dp-pp");
  CHECK(s.parallel.sequence_parallel);
  CHECK(s.parallel.zero == 1);
  CHECK(s.schedule.kind == ScheduleKind::OneFOneB);
  CHECK(s.schedule.virtual_stages == 1);
  CHECK(s.schedule.layers_per_stage.empty());
  CHECK(s.train.steps == 1000);
  CHECK(s.train.global_batch == 512);
  CHECK(s.train.micro_batch == 1);
  CHECK(s.train.precision == Precision::Bf16);
  CHECK(s.train.recompute == Recompute::Selective);
  CHECK(s.train.seed == 1234);
  CHECK(s.train.grad_clip == 1.0);
  CHECK(s.optimizer.kind == config::OptimizerKind::AdamW);
  CHECK(s.optimizer.lr == 3.0e-4);
  CHECK(s.optimizer.min_lr == 3.0e-5);
  CHECK(s.optimizer.betas == std::array<double, 2>{0.9, 0.95});
  CHECK(s.optimizer.eps == 1.0e-8);
  CHECK(s.optimizer.weight_decay == 0.1);
  CHECK(s.optimizer.warmup_steps == 2000);
  CHECK(s.optimizer.decay == LrDecay::Cosine);
  CHECK(s.data.format == DataFormat::Llmc);
  CHECK(s.data.train == "data/train_*.bin");
  CHECK(s.data.valid == "data/val.bin");
  CHECK(s.data.eval_every == 100);
  CHECK(s.checkpoint.dir == "runs/x/ckpt");
  CHECK(s.checkpoint.every == 500);
  CHECK(s.checkpoint.keep == 3);
  CHECK(s.checkpoint.resume == Resume::Auto);
  CHECK(s.checkpoint.load_hf.empty());
  CHECK(s.cluster.nodes == 32);
  CHECK(s.cluster.gpus_per_node == 8);
  CHECK(s.cluster.gpu == "h100-sxm");
  CHECK(s.logging.every == 10);
  CHECK(s.logging.metrics == "runs/x/metrics.jsonl");
  CHECK(s.logging.trace.empty());
  CHECK(s.comm.timeout_s == 600.0);
  // Derived: world from the cluster, dp = 256 / (8*4*1), 512 / (1*8) microbatches, 32 / 4 layers.
  CHECK(s.world == 256);
  CHECK(s.parallel.dp == 8);
  CHECK(s.train.microbatches == 64);
  CHECK(s.schedule.resolved_layers_per_stage == std::vector<int>{8, 8, 8, 8});
  // Its one warning: warmup_steps 2000 > steps 1000.
  REQUIRE(result.diags.warnings.size() == 1);
  CHECK(result.diags.warnings.front().key == "optimizer.warmup_steps");
}

TEST_CASE("locations point at each key, 1-based, flow maps included", "[config][resolve]") {
  const std::string path = corpus_path("good/design-example.yaml");
  LoadResult result = load_file(path);
  REQUIRE(result.ok());
  auto where = [&](const std::string& key) {
    const Location& l = result.locations.at(key);
    CHECK(l.origin == path);
    return std::pair{l.line, l.column};
  };
  CHECK(where("name") == std::pair{3, 1});
  CHECK(where("model") == std::pair{5, 1});
  CHECK(where("model.arch") == std::pair{6, 3});
  CHECK(where("parallel.tp") == std::pair{18, 3});
  CHECK(where("optimizer") == std::pair{38, 1});
  CHECK(where("optimizer.kind") == std::pair{38, 13});
  CHECK(where("optimizer.weight_decay") == std::pair{39, 13});
  CHECK(where("comm.timeout_s") == std::pair{48, 8});
  // Every key of the file is recorded: 10 sections and 55 values.
  CHECK(result.locations.size() == 65);
}

TEST_CASE("at() locates keys that were not written at their section", "[config][resolve]") {
  LoadResult result = load("name: tiny\nmodel:\n  layers: 12\nschedule:\n  layers_per_stage: [12]\n");
  REQUIRE(result.ok());
  Diagnostic written = result.at("model.layers", "m");
  CHECK(std::pair{written.line, written.column} == std::pair{3, 3});
  Diagnostic section = result.at("model.ffn_hidden", "m", "f");
  CHECK(std::pair{section.line, section.column} == std::pair{2, 1});
  CHECK(section.format() == "job.yaml:2:1: model.ffn_hidden: m (fix: f)");
  Diagnostic element = result.at("schedule.layers_per_stage[0]", "m");
  CHECK(element.line == 5);
  Diagnostic nowhere = result.at("cluster.gpu", "unknown hardware");
  CHECK(nowhere.line == 0);
  CHECK(nowhere.format() == "job.yaml: cluster.gpu: unknown hardware");
}

TEST_CASE("world comes from LoadOptions when given, else from the cluster", "[config][resolve]") {
  const std::string job = "name: tiny\ncluster: {nodes: 2, gpus_per_node: 4}\nparallel: {tp: 2}\n";
  LoadResult from_cluster = load(job);
  REQUIRE(from_cluster.ok());
  CHECK(from_cluster.spec.world == 8);
  CHECK(from_cluster.spec.parallel.dp == 4);

  LoadResult from_option = load(job, {}, 2);
  REQUIRE(from_option.ok());
  CHECK(from_option.spec.world == 2);
  CHECK(from_option.spec.parallel.dp == 1);

  LoadResult mismatch = load(job, {}, 3);
  REQUIRE(mismatch.diags.errors.size() == 1);
  CHECK_THAT(mismatch.diags.errors.front().message,
             Catch::Contains("the world has 3 ranks (from the command line)"));

  LoadResult zero = load(job, {}, 0);
  REQUIRE(zero.diags.errors.size() == 1);
  CHECK(zero.diags.errors.front().key == "world");
}

TEST_CASE("explicit dp is accepted when the product matches the world", "[config][resolve]") {
  LoadResult result = load("name: tiny\ncluster: {gpus_per_node: 8}\nparallel: {tp: 2, pp: 2, dp: 2}\n");
  REQUIRE(result.ok());
  CHECK_FALSE(result.spec.parallel.dp_auto);
  CHECK(result.spec.parallel.dp == 2);
  CHECK(result.spec.train.microbatches == 4);
  CHECK(result.spec.schedule.resolved_layers_per_stage == std::vector<int>{6, 6});
}

TEST_CASE("an MoE job with an explicit interleaved split resolves", "[config][resolve]") {
  LoadResult result = load_file(corpus_path("good/mixtral-interleaved.yaml"));
  CAPTURE(describe_all(result.diags));
  REQUIRE(result.ok());
  CHECK(result.diags.warnings.empty());
  const JobSpec& s = result.spec;
  CHECK(s.world == 16);
  CHECK(s.parallel.dp == 4);
  REQUIRE(s.model.moe);
  CHECK(s.model.moe->experts == 8);
  CHECK(s.model.moe->capacity_factor == 1.25);  // default kept
  CHECK(s.model.moe->aux_loss_coef == 0.01);
  CHECK(s.schedule.resolved_layers_per_stage == std::vector<int>{3, 4, 4, 3});
  CHECK(s.train.microbatches == 4);
  CHECK(s.optimizer.decay == LrDecay::Wsd);
  CHECK(s.optimizer.decay_steps == 10);
  CHECK_FALSE(s.data.shuffle);
  CHECK(s.comm.timeout_s == 30.5);
  CHECK_FALSE(s.model.tie_embeddings);
}

TEST_CASE("mixtral without model.moe gets the MoE defaults", "[config][resolve]") {
  LoadResult result = load("name: tiny\nmodel: {arch: mixtral, ffn_hidden: 2048}\n");
  REQUIRE(result.ok());
  REQUIRE(result.spec.model.moe);
  CHECK(result.spec.model.moe->experts == 8);
  CHECK(result.spec.model.moe->top_k == 2);
}

TEST_CASE("interleaved even split has pp*virtual_stages entries", "[config][resolve]") {
  LoadResult result = load(
      "name: tiny\ncluster: {gpus_per_node: 2}\nparallel: {pp: 2}\nschedule: {kind: interleaved-1f1b, "
      "virtual_stages: 3}\n");
  REQUIRE(result.ok());
  CHECK(result.spec.schedule.resolved_layers_per_stage == std::vector<int>{2, 2, 2, 2, 2, 2});
}

TEST_CASE("zbv and dualpipev imply two virtual stages per rank", "[config][resolve]") {
  for (const std::string kind : {"zbv", "dualpipev"}) {
    for (const std::string vpp : {"", ", virtual_stages: 2"}) {
      CAPTURE(kind, vpp);
      LoadResult result = load("name: tiny\nmodel: {arch: llama, layers: 8, hidden: 64, heads: 4, ffn_hidden: 128, "
                               "vocab: 100, seq_len: 16}\ncluster: {gpus_per_node: 2}\nparallel: {pp: 2}\n"
                               "schedule: {kind: " + kind + vpp + "}\n");
      REQUIRE(result.ok());
      CHECK(result.spec.schedule.virtual_stages == 2);
      CHECK(result.spec.schedule.resolved_layers_per_stage == std::vector<int>{2, 2, 2, 2});
    }
  }
}

TEST_CASE("not-given kv_heads and ffn_hidden resolve, and vocab pads to tp", "[config][resolve]") {
  for (const std::string given :
       {"", "  kv_heads: null\n  ffn_hidden: ~\n", "  kv_heads: 0\n  ffn_hidden: 0\n"}) {
    CAPTURE(given);
    LoadResult result = load(
        "name: tiny\ncluster: {gpus_per_node: 4}\nparallel: {tp: 4}\nmodel:\n  hidden: 512\n"
        "  heads: 8\n" +
        given);
    REQUIRE(result.ok());
    CHECK(result.spec.model.kv_heads == 8);
    CHECK(result.spec.model.ffn_hidden == 2048);
    CHECK(result.spec.model.padded_vocab == 50260);
    REQUIRE(result.diags.warnings.size() == 1);
    CHECK(
        result.diags.warnings.front().message ==
        "model.vocab = 50257 is padded to 50260 (a multiple of parallel.tp = 4); the 3 extra rows are never "
        "predicted");
  }
}

TEST_CASE("accepted spellings: signs, quoted words, booleans, ints for floats, null sections",
          "[config][resolve]") {
  LoadResult result = load(
      "name: tiny\nparallel: {tp: +1, dp: 'auto', sequence_parallel: False}\noptimizer: {lr: 1, eps: 1E-8}\n"
      "data: {shuffle: TRUE, valid: ~}\ncomm:\nlogging:\n  trace:\n");
  CAPTURE(describe_all(result.diags));
  REQUIRE(result.ok());
  CHECK(result.spec.parallel.tp == 1);
  CHECK(result.spec.parallel.dp_auto);
  CHECK_FALSE(result.spec.parallel.sequence_parallel);
  CHECK(result.spec.optimizer.lr == 1.0);
  CHECK(result.spec.optimizer.eps == 1.0e-8);
  CHECK(result.spec.data.shuffle);
  CHECK(result.spec.comm.timeout_s == 600.0);
  CHECK(result.spec.logging.trace.empty());
}

TEST_CASE("several independent problems are all reported at once", "[config][resolve]") {
  LoadResult result = load(
      "name: tiny\n"
      "model:\n"
      "  hiden: 768\n"   // unknown key
      "  layers: 2.5\n"  // float for an int
      "  arch: lama\n"   // bad enum
      "parallel:\n"
      "  tp: 0\n"               // degree < 1
      "  order: tp-cp-dp-pp\n"  // missing axis
      "optimizer:\n"
      "  lr: 1.0e-4\n"
      "  min_lr: 1.0e-3\n"   // min_lr > lr
      "  betas: [0.9, 2]\n"  // beta out of range
      "train:\n"
      "  global_batch: 8\n"
      "  global_batch: 8\n");  // duplicate
  CAPTURE(describe_all(result.diags));
  CHECK(result.diags.errors.size() == 8);
  for (const std::string key : {"model.hiden", "model.layers", "model.arch", "parallel.tp", "parallel.order",
                                "optimizer.min_lr", "optimizer.betas[1]", "train.global_batch"}) {
    CAPTURE(key);
    CHECK(find_key(result.diags.errors, key));
  }
}

TEST_CASE("to_string spells every enum value as YAML does", "[config][resolve]") {
  auto names = [](auto values) {
    std::vector<std::string> out;
    for (auto value : values) out.emplace_back(to_string(value));
    return out;
  };
  CHECK(names(EnumValues<Backend>::values) == std::vector<std::string>{"auto", "cpu", "cuda"});
  CHECK(names(EnumValues<Arch>::values) == std::vector<std::string>{"gpt2", "llama", "mixtral"});
  CHECK(names(EnumValues<ScheduleKind>::values) ==
        std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev"});
  CHECK(names(EnumValues<Precision>::values) == std::vector<std::string>{"fp32", "bf16", "fp8"});
  CHECK(names(EnumValues<Fp8Scaling>::values) == std::vector<std::string>{"current", "delayed"});
  CHECK(names(EnumValues<Recompute>::values) == std::vector<std::string>{"none", "selective", "full"});
  CHECK(names(EnumValues<LrDecay>::values) ==
        std::vector<std::string>{"cosine", "linear", "constant", "wsd"});
  CHECK(names(EnumValues<DataFormat>::values) == std::vector<std::string>{"llmc", "megatron", "synthetic"});
  CHECK(names(EnumValues<Resume>::values) == std::vector<std::string>{"auto", "never"});
}

}  // namespace ptrain::config::testing
