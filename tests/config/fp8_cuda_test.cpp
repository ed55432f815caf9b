// What cuBLASLt's FP8 GEMMs need of a job (engine/config/fp8_cuda.h): every GEMM dimension of a
// rank's FP8 linear layers a multiple of 16, each refused at its key; FP8 tensor cores from
// compute capability 8.9.
#include "engine/config/fp8_cuda.h"

#include <catch2/catch.hpp>

#include "tests/config/config_test_support.h"

namespace ptrain::config::testing {
namespace {

// A job of `world` ranks (parallel.dp: auto fills what tp and cp leave).
JobSpec fp8_spec(const std::vector<std::string>& overrides, int world = 1) {
  std::vector<std::string> all = {"train.precision=fp8"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  const LoadResult r = load("name: t\nbackend: cpu\n", all, world);
  INFO(describe_all(r.diags));
  REQUIRE(r.ok());
  return r.spec;
}

}  // namespace

TEST_CASE("fp8_shape_refusal names the first GEMM dimension that is not a multiple of 16", "[fp8]") {
  // GPT-2 small: 768 hidden, 12 heads of 64, 3072 MLP columns; 1024 tokens.
  CHECK_FALSE(fp8_shape_refusal(fp8_spec({})).has_value());
  CHECK_FALSE(fp8_shape_refusal(fp8_spec({"parallel.tp=4", "parallel.cp=2"}, 8)).has_value());
  CHECK_FALSE(fp8_shape_refusal(load("name: t\n").spec).has_value());  // bf16: nothing to refuse

  const auto refused = fp8_shape_refusal(fp8_spec({"model.seq_len=1000", "parallel.cp=1"}));
  REQUIRE(refused.has_value());
  CHECK(refused->key == "model.seq_len");
  CHECK_THAT(refused->reason, Catch::Contains("tokens per microbatch") && Catch::Contains("is 1000"));

  // Heads of 40: 16 of them make 640 columns, one kv head 40.
  const auto kv = fp8_shape_refusal(fp8_spec(
      {"model.arch=llama", "model.hidden=640", "model.heads=16", "model.kv_heads=1", "model.ffn_hidden=1792"}));
  REQUIRE(kv.has_value());
  CHECK(kv->key == "model.kv_heads");
  CHECK_FALSE(fp8_shape_refusal(fp8_spec({"model.arch=llama", "model.hidden=640", "model.heads=16",
                                          "model.kv_heads=2", "model.ffn_hidden=1792"}))
                  .has_value());
  const auto ffn = fp8_shape_refusal(fp8_spec({"model.arch=llama", "model.ffn_hidden=3080", "parallel.tp=4"}, 4));
  REQUIRE(ffn.has_value());
  CHECK(ffn->key == "model.ffn_hidden");
  CHECK_THAT(ffn->reason, Catch::Contains("is 770"));

  // An expert GEMM takes micro_batch * capacity rows: 8 experts, top 2 of a 48-token sequence at
  // capacity_factor 1.25 take 15 tokens each (cuBLASLt would refuse it at the first step), 1.5 take 18,
  // 2 micro-batched sequences of 1.25's 15 make 30: none a multiple of 16. 1.0 at micro_batch 4: 48.
  const std::vector<std::string> moe = {"model.arch=mixtral", "model.ffn_hidden=2048", "model.moe={experts: 8, top_k: 2}",
                                       "model.seq_len=48"};
  for (const auto& [sets, rows] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{}, 15}, {{"model.moe.capacity_factor=1.5"}, 18}, {{"train.micro_batch=2", "train.global_batch=2"}, 30}}) {
    std::vector<std::string> all = moe;
    all.insert(all.end(), sets.begin(), sets.end());
    const auto experts = fp8_shape_refusal(fp8_spec(all));
    REQUIRE(experts.has_value());
    CHECK(experts->key == "model.moe.capacity_factor");
    CHECK_THAT(experts->reason, Catch::Contains("an expert GEMM's rows") && Catch::Contains("is " + std::to_string(rows)));
  }
  std::vector<std::string> fits = moe;
  fits.insert(fits.end(), {"model.moe.capacity_factor=1.0", "train.micro_batch=4", "train.global_batch=4"});
  CHECK_FALSE(fp8_shape_refusal(fp8_spec(fits)).has_value());
}

TEST_CASE("fp8_device_refusal: FP8 tensor cores from compute capability 8.9", "[fp8]") {
  const JobSpec spec = fp8_spec({});
  CHECK_FALSE(fp8_device_refusal(spec, 90).has_value());
  CHECK_FALSE(fp8_device_refusal(spec, 89).has_value());
  const auto a100 = fp8_device_refusal(spec, 80);
  REQUIRE(a100.has_value());
  CHECK(a100->key == "train.precision");
  CHECK_THAT(a100->reason, Catch::Contains("this GPU's is 8.0"));
  CHECK_FALSE(fp8_device_refusal(load("name: t\n").spec, 80).has_value());
}

}  // namespace ptrain::config::testing
