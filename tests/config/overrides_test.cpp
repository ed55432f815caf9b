// --set key=value: same readers and rules as the file, origin "--set key=value", line 0.
#include <catch2/catch.hpp>

#include "engine/config/text.h"
#include "tests/config/config_test_support.h"

namespace ptrain::config::testing {
namespace {

const std::string kFourRanks = "name: tiny\ncluster: {gpus_per_node: 4}\nparallel:\n  tp: 1\n";

}  // namespace

TEST_CASE("a valid override replaces the file's value and records where it came from", "[config][set]") {
  LoadResult result = load(kFourRanks, {"parallel.tp=2"});
  REQUIRE(result.ok());
  CHECK(result.spec.parallel.tp == 2);
  CHECK(result.spec.parallel.dp == 2);
  const Location& where = result.locations.at("parallel.tp");
  CHECK(where.line == 0);
  CHECK(where.origin == "--set parallel.tp=2");
}

TEST_CASE("overrides apply in order: the last one wins", "[config][set]") {
  LoadResult result = load(kFourRanks, {"parallel.tp=4", "parallel.tp=2"});
  REQUIRE(result.ok());
  CHECK(result.spec.parallel.tp == 2);
}

TEST_CASE("override values are YAML: flow lists, flow maps, null, quoted text", "[config][set]") {
  LoadResult result =
      load("name: tiny\n", {"optimizer.betas=[0.9,0.99]", "optimizer={lr: 1.0e-3, min_lr: 0}",
                            "data.valid=null", "name='my run: 2'", "checkpoint.dir=runs/a b"});
  REQUIRE(result.ok());
  CHECK(result.spec.optimizer.betas[0] == 0.9);
  CHECK(result.spec.optimizer.betas[1] == 0.99);
  CHECK(result.spec.optimizer.lr == 1.0e-3);
  CHECK(result.spec.optimizer.min_lr == 0.0);
  CHECK(result.spec.data.valid.empty());
  CHECK(result.spec.name == "my run: 2");
  CHECK(result.spec.checkpoint.dir == "runs/a b");
  CHECK(result.locations.at("optimizer.lr").origin == "--set optimizer={lr: 1.0e-3, min_lr: 0}");
}

TEST_CASE("an invalid override value gets the same message as in the file", "[config][set]") {
  LoadResult result = load("name: tiny\n", {"parallel.tp=abc"});
  REQUIRE(result.diags.errors.size() == 1);
  CHECK(result.diags.errors.front().format() ==
        "--set parallel.tp=abc: parallel.tp: expected an integer >= 1, got abc (fix: write a whole number "
        "such as 8)");

  LoadResult element = load("name: tiny\n", {"optimizer.betas=[0.9, 1.5]"});
  REQUIRE(element.diags.errors.size() == 1);
  CHECK(element.diags.errors.front().key == "optimizer.betas[1]");
  CHECK(element.diags.errors.front().line == 0);
}

TEST_CASE("unknown override paths get did-you-mean", "[config][set]") {
  LoadResult typo = load("name: tiny\n", {"model.hiden=1024"});
  REQUIRE(typo.diags.errors.size() == 1);
  CHECK(typo.diags.errors.front().format() ==
        "--set model.hiden=1024: model.hiden: unknown key 'hiden' in model (fix: did you mean 'hidden'?)");

  LoadResult section = load("name: tiny\n", {"paralel.tp=2"});
  REQUIRE(section.diags.errors.size() == 1);
  CHECK_THAT(section.diags.errors.front().format(), Catch::Contains("did you mean 'parallel'?"));

  LoadResult wrong_section = load("name: tiny\n", {"tp=2"});
  REQUIRE(wrong_section.diags.errors.size() == 1);
  CHECK_THAT(wrong_section.diags.errors.front().fix, Catch::Contains("did you mean 'parallel.tp'?"));

  LoadResult nothing_close = load("name: tiny\n", {"tensor_parallel=2"});
  REQUIRE(nothing_close.diags.errors.size() == 1);
  CHECK_THAT(nothing_close.diags.errors.front().fix,
             Catch::StartsWith("valid keys at the top level: name, backend"));
}

TEST_CASE("malformed overrides are reported, never applied", "[config][set]") {
  struct Case {
    std::string text, message;
  };
  for (const Case& c : std::vector<Case>{
           {"parallel.tp", "expected key=value"},
           {"=2", "the key before '=' is empty"},
           {"parallel..tp=2", "a key path has an empty part"},
           {"parallel.tp.size=2", "parallel.tp: is a value, not a section: it has no key 'size'"},
           {"parallel.tp=[1, 2", "invalid YAML: end of sequence flow not found"},
           {"data.train=*.bin", "invalid YAML"},
           {"parallel.tp=1\n---\n2", "the value holds several YAML documents"},
           {"name=\xff", "not valid UTF-8"},
           {"name=,", "invalid YAML: unexpected ','"},  // yaml-cpp 0.7 loops forever on this in LoadAll
           {"model=gpt2", "expected a mapping of model keys, got gpt2"},
           {"optimizer={lr: 1, lr: 2}", "duplicate key 'lr'"},
       }) {
    CAPTURE(c.text);
    LoadResult result = load("name: tiny\n", {c.text});
    CAPTURE(describe_all(result.diags));
    REQUIRE(result.diags.errors.size() == 1);
    const Diagnostic& error = result.diags.errors.front();
    CHECK_THAT(error.format(), Catch::Contains(c.message));
    CHECK(error.line == 0);
    CHECK(error.origin == "--set " + printable(c.text, 120));
  }
}

TEST_CASE("an empty override value means null", "[config][set]") {
  LoadResult cleared = load("name: tiny\ndata: {valid: val.bin, eval_every: 10}\n", {"data.valid="});
  REQUIRE(cleared.ok());
  CHECK(cleared.spec.data.valid.empty());
  LoadResult refused = load("name: tiny\n", {"parallel.tp="});
  REQUIRE(refused.diags.errors.size() == 1);
  CHECK_THAT(refused.diags.errors.front().message, Catch::Contains("got an empty value (null)"));
}

TEST_CASE("overrides reach into optional sections", "[config][set]") {
  const std::string mixtral = "name: tiny\nmodel: {arch: mixtral, ffn_hidden: 2048}\n";
  LoadResult experts = load(mixtral, {"model.moe.experts=4"});
  REQUIRE(experts.ok());
  REQUIRE(experts.spec.model.moe);
  CHECK(experts.spec.model.moe->experts == 4);
  CHECK(experts.spec.model.moe->top_k == 2);

  LoadResult dense = load("name: tiny\n", {"model.moe.experts=4"});
  REQUIRE(dense.diags.errors.size() == 1);
  CHECK(dense.diags.errors.front().key == "model.moe");
  CHECK(dense.diags.errors.front().origin == "--set model.moe.experts=4");

  LoadResult removed = load("name: tiny\nmodel:\n  moe: {experts: 4}\n", {"model.moe=null"});
  CHECK(removed.ok());
  CHECK_FALSE(removed.spec.model.moe);
}

TEST_CASE("rule errors caused by an override point at the override", "[config][set]") {
  LoadResult result = load(kFourRanks, {"parallel.dp=3"});
  REQUIRE(result.diags.errors.size() == 1);
  const Diagnostic& error = result.diags.errors.front();
  CHECK(error.key == "parallel.dp");
  CHECK(error.origin == "--set parallel.dp=3");
  CHECK(error.format() ==
        "--set parallel.dp=3: parallel.dp: tp*pp*cp*dp = 1*1*1*3 = 3 but the world has 4 ranks "
        "(cluster.nodes*cluster.gpus_per_node = 1*4 = 4) (fix: set parallel.dp: auto (dp = 4) or run on 3 "
        "ranks)");
}

TEST_CASE("file errors and override errors are all reported together", "[config][set]") {
  LoadResult result = load("name: tiny\nmodel:\n  layers: zero\n", {"parallel.tp=x", "nope=1"});
  CHECK(result.diags.errors.size() == 3);
  CHECK(find_key(result.diags.errors, "model.layers"));
  CHECK(find_key(result.diags.errors, "parallel.tp"));
  CHECK(find_key(result.diags.errors, "nope"));
}

}  // namespace ptrain::config::testing
