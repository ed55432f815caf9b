// yaml_with_values: the written YAML loads to the spec that loading the original with the same
// values as --set overrides gives; rederive: the rules on a changed spec match a fresh load.
#include "engine/config/yaml_edit.h"

#include <catch2/catch.hpp>

#include "engine/config/loader.h"
#include "tests/config/config_test_support.h"

namespace ptrain::config::testing {
namespace {

const std::string kJob = R"(# a comment yaml-cpp drops
name: edit
cluster: {nodes: 1, gpus_per_node: 4}
model: {arch: llama, layers: 12, hidden: 256, heads: 8, kv_heads: 4, ffn_hidden: 512, vocab: 1000, seq_len: 128}
parallel:
  tp: 1
  pp: 4
schedule:
  kind: interleaved-1f1b
  virtual_stages: 3
  layers_per_stage: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
train: {global_batch: 16, micro_batch: 1, recompute: none}
optimizer: {kind: adamw, lr: 3.0e-4, betas: [0.9, 0.95]}
)";

void check_same_spec(const JobSpec& a, const JobSpec& b) {
  CHECK(a.parallel.tp == b.parallel.tp);
  CHECK(a.parallel.pp == b.parallel.pp);
  CHECK(a.parallel.dp == b.parallel.dp);
  CHECK(a.parallel.zero == b.parallel.zero);
  CHECK(a.schedule.kind == b.schedule.kind);
  CHECK(a.schedule.virtual_stages == b.schedule.virtual_stages);
  CHECK(a.schedule.layers_per_stage == b.schedule.layers_per_stage);
  CHECK(a.schedule.resolved_layers_per_stage == b.schedule.resolved_layers_per_stage);
  CHECK(a.train.micro_batch == b.train.micro_batch);
  CHECK(a.train.microbatches == b.train.microbatches);
  CHECK(a.train.recompute == b.train.recompute);
  CHECK(a.optimizer.lr == b.optimizer.lr);
  CHECK(a.optimizer.betas == b.optimizer.betas);
  CHECK(a.model.padded_vocab == b.model.padded_vocab);
  CHECK(a.cluster.nodes == b.cluster.nodes);
  CHECK(a.cluster.gpus_per_node == b.cluster.gpus_per_node);
  CHECK(a.world == b.world);
}

}  // namespace

TEST_CASE("the edited YAML loads as the original with the values as overrides", "[config][edit]") {
  const std::vector<std::string> values = {
      "parallel.tp=2",          "parallel.dp=auto",          "parallel.zero=1",
      "schedule.kind=1f1b",     "schedule.virtual_stages=1", "schedule.layers_per_stage=null",
      "train.micro_batch=2",    "train.recompute=selective", "cluster.nodes=2",
      "cluster.gpus_per_node=4"};
  const std::string edited = yaml_with_values(kJob, values);
  INFO(edited);
  const LoadResult from_file = load(edited);
  const LoadResult with_overrides = load(kJob, values);
  REQUIRE(from_file.ok());
  REQUIRE(with_overrides.ok());
  check_same_spec(from_file.spec, with_overrides.spec);
  CHECK(from_file.spec.parallel.tp == 2);
  CHECK(from_file.spec.world == 8);  // the new cluster section
  CHECK(from_file.spec.schedule.layers_per_stage.empty());
  CHECK(edited.find("layers_per_stage") == std::string::npos);  // null removes the key
  CHECK(edited.find("optimizer: {") != std::string::npos);      // flow style kept
  CHECK(edited.find("3.0e-4") != std::string::npos);            // scalars as written
}

TEST_CASE("a list value is written as a list", "[config][edit]") {
  const std::string edited = yaml_with_values(
      kJob, {"schedule.kind=1f1b", "schedule.virtual_stages=1", "schedule.layers_per_stage=[2, 4, 4, 2]"});
  const LoadResult result = load(edited);
  REQUIRE(result.ok());
  CHECK(result.spec.schedule.resolved_layers_per_stage == std::vector<int>{2, 4, 4, 2});
}

TEST_CASE("rederive gives what a fresh load of the changed values gives", "[config][edit]") {
  const LoadResult job = load(kJob);
  REQUIRE(job.ok());
  JobSpec changed = job.spec;
  changed.parallel.tp = 2;
  changed.parallel.pp = 2;
  changed.schedule.kind = ScheduleKind::OneFOneB;
  changed.schedule.virtual_stages = 1;
  changed.schedule.layers_per_stage.clear();
  changed.train.micro_batch = 2;
  changed.world = 8;
  const LoadResult derived = rederive(job, changed);
  REQUIRE(derived.ok());
  LoadOptions options;
  options.overrides = {"parallel.tp=2",
                       "parallel.pp=2",
                       "schedule.kind=1f1b",
                       "schedule.virtual_stages=1",
                       "schedule.layers_per_stage=null",
                       "train.micro_batch=2"};
  options.world = 8;
  const LoadResult fresh = load_string(kJob, "test.yaml", options);
  REQUIRE(fresh.ok());
  check_same_spec(derived.spec, fresh.spec);
  CHECK(derived.spec.parallel.dp == 2);
  CHECK(derived.spec.train.microbatches == 4);

  // and a layout that breaks a rule is reported, located where the file wrote the key
  changed.parallel.tp = 3;
  const LoadResult bad = rederive(job, changed);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.diags.errors.front().line > 0);
}
}  // namespace ptrain::config::testing
