// `ptrain plan` tries fp8 beside bf16 exactly where `ptrain run` would execute it
// (plan/fp8_refusal.h: the engine's limits, the device's FP8 tensor cores, cuBLASLt's shapes):
// on the CPU backend today, on no GPU while the engine runs fp8 on the CPU only, never on a GPU
// without FP8 tensor cores, never for an fp32 job.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "engine/config/engine_limits.h"
#include "engine/plan/builtin_profile.h"
#include "engine/plan/fp8_refusal.h"
#include "engine/plan/search.h"
#include "tests/plan/jobs.h"

using namespace ptrain;
using config::Precision;

namespace {

constexpr int kEverything = 1 << 20;  // a `top` no search reaches: every fitting layout is ranked

// test::kSmallLlama as two CPU ranks.
const std::vector<std::string> kOnTwoCpuRanks = {"backend=cpu", "cluster.gpu=cpu", "cluster.gpus_per_node=2"};

std::vector<std::string> with(std::vector<std::string> keys, const std::string& key) {
  keys.push_back(key);
  return keys;
}

// A layout's keys but its precision: the same layout in another precision has the same.
std::vector<std::string> keys_but_precision(plan::Layout layout, bool experts) {
  layout.precision = Precision::Bf16;
  return plan::layout_assignments(layout, experts);
}

int rows_in(const plan::SearchResult& r, Precision precision) {
  return static_cast<int>(std::count_if(r.best.begin(), r.best.end(), [&](const plan::RankedLayout& ranked) {
    return ranked.layout.precision == precision;
  }));
}

config::JobSpec as_fp8(config::JobSpec spec) {
  spec.train.precision = Precision::Fp8;
  return spec;
}

}  // namespace

TEST_CASE("a bf16 job on the CPU backend is tried in bf16 and fp8, ranked by the estimate", "[fp8]") {
  const plan::HardwareProfile& cpu = *plan::find_hardware("cpu");
  const config::LoadResult job = test::read_for_plan(test::kSmallLlama, 2, kOnTwoCpuRanks);
  const plan::SearchResult all = plan::search_layouts(job, cpu, kEverything);
  CHECK(all.fp8_refused == 0);
  CHECK_FALSE(all.first_fp8_refusal);
  CHECK(all.layouts == all.invalid + all.over_memory + all.fitting);
  REQUIRE(rows_in(all, Precision::Fp8) > 0);
  REQUIRE(rows_in(all, Precision::Bf16) > 0);
  CHECK(rows_in(all, Precision::Fp8) + rows_in(all, Precision::Bf16) == static_cast<int>(all.best.size()));

  // Ranked by step time whatever the precision; each fp8 layout beside its bf16 twin in the order
  // their estimates give (on the CPU fp8's emulation runs at the fp32 GEMM's rate plus its casts).
  CHECK(std::is_sorted(all.best.begin(), all.best.end(), [](const auto& a, const auto& b) {
    return a.estimate.step_time_s < b.estimate.step_time_s;
  }));
  std::map<std::vector<std::string>, double> bf16_step;
  for (const plan::RankedLayout& r : all.best)
    if (r.layout.precision == Precision::Bf16) bf16_step[keys_but_precision(r.layout, false)] = r.estimate.step_time_s;
  double fastest_bf16 = 1e300, fastest_fp8 = 1e300;
  int twins = 0;
  for (const plan::RankedLayout& r : all.best) {
    CHECK(r.job.spec.train.precision == r.layout.precision);
    CHECK(r.bound_s <= r.estimate.step_time_s);
    double& fastest = r.layout.precision == Precision::Fp8 ? fastest_fp8 : fastest_bf16;
    fastest = std::min(fastest, r.estimate.step_time_s);
    if (r.layout.precision != Precision::Fp8) continue;
    const auto twin = bf16_step.find(keys_but_precision(r.layout, false));
    if (twin == bf16_step.end()) continue;  // fits in one precision only with another recompute
    ++twins;
    const auto at = [&](Precision p) {
      return std::find_if(all.best.begin(), all.best.end(), [&](const plan::RankedLayout& x) {
        return x.layout.precision == p && keys_but_precision(x.layout, false) == twin->first;
      });
    };
    if (twin->second != r.estimate.step_time_s)
      CHECK((at(Precision::Bf16) < at(Precision::Fp8)) == (twin->second < r.estimate.step_time_s));
  }
  CHECK(twins > 0);
  INFO("fastest bf16 " << fastest_bf16 << " s, fastest fp8 " << fastest_fp8 << " s");
  CHECK(all.best.front().layout.precision == (fastest_bf16 <= fastest_fp8 ? Precision::Bf16 : Precision::Fp8));

  // The bounded search ranks the same, fp8 rows included.
  for (const int k : {1, 5, 20}) {
    const plan::SearchResult top = plan::search_layouts(job, cpu, k);
    REQUIRE(top.best.size() == static_cast<std::size_t>(k));
    for (std::size_t i = 0; i < top.best.size(); ++i) {
      CHECK(plan::layout_assignments(top.best[i].layout, false) == plan::layout_assignments(all.best[i].layout, false));
      CHECK(top.best[i].estimate.step_time_s == all.best[i].estimate.step_time_s);
    }
  }
}

TEST_CASE("an fp8 row's keys set train.precision, and validate reproduces it", "[fp8]") {
  const plan::HardwareProfile& cpu = *plan::find_hardware("cpu");
  const config::LoadResult job = test::read_for_plan(test::kSmallLlama, 2, kOnTwoCpuRanks);
  const plan::SearchResult all = plan::search_layouts(job, cpu, kEverything);
  int checked = 0;
  for (const plan::RankedLayout& r : all.best) {
    if (r.layout.precision != Precision::Fp8 || checked == 4) continue;
    ++checked;
    const std::vector<std::string> keys = plan::layout_assignments(r.layout, false);
    CHECK(std::count(keys.begin(), keys.end(), "train.precision=fp8") == 1);
    std::vector<std::string> overrides = kOnTwoCpuRanks;
    overrides.insert(overrides.end(), keys.begin(), keys.end());
    const config::LoadResult loaded = test::load_job(test::kSmallLlama, overrides, 2);
    CHECK(loaded.spec.train.precision == Precision::Fp8);
    CHECK(config::engine_limits(loaded.spec).empty());  // `run` executes it
    const plan::Estimate est = plan::estimate(loaded, cpu);
    CHECK(est.diags.ok());
    CHECK(est.step_time_s == r.estimate.step_time_s);
    CHECK(est.peak_memory_bytes() == r.estimate.peak_memory_bytes());
  }
  CHECK(checked == 4);
}

TEST_CASE("a job that asks fp8 is tried in bf16 too, and one that asks fp32 stays fp32", "[fp8]") {
  const plan::HardwareProfile& cpu = *plan::find_hardware("cpu");
  const plan::SearchResult fp8 = plan::search_layouts(
      test::read_for_plan(test::kSmallLlama, 2, with(kOnTwoCpuRanks, "train.precision=fp8")), cpu, kEverything);
  CHECK(rows_in(fp8, Precision::Fp8) > 0);
  CHECK(rows_in(fp8, Precision::Bf16) > 0);
  const plan::SearchResult fp32 = plan::search_layouts(
      test::read_for_plan(test::kSmallLlama, 2, with(kOnTwoCpuRanks, "train.precision=fp32")), cpu, kEverything);
  REQUIRE_FALSE(fp32.best.empty());
  CHECK(rows_in(fp32, Precision::Fp32) == static_cast<int>(fp32.best.size()));
  CHECK(fp32.fp8_refused == 0);
  // A bf16 job is never tried in fp32 (nor an fp8 one).
  CHECK(rows_in(fp8, Precision::Fp32) == 0);
}

TEST_CASE("a GPU job is not tried in fp8 while the engine refuses fp8 off the CPU", "[fp8]") {
  // engine_limits refuses train.precision: fp8 with a backend other than cpu (the CUDA FP8 GEMMs
  // have not passed their GPU checks): plan refuses every layout with that very limit.
  const plan::HardwareProfile& h100 = *plan::find_hardware("h100-sxm");
  REQUIRE(h100.runs_fp8());
  for (const char* backend : {"backend=cuda", "backend=auto"}) {
    INFO(backend);
    const config::LoadResult job = test::read_for_plan(test::kSmallLlama, 8, {backend});
    const plan::SearchResult all = plan::search_layouts(job, h100, kEverything);
    REQUIRE_FALSE(all.best.empty());
    CHECK(rows_in(all, Precision::Fp8) == 0);
    CHECK(all.fp8_refused == all.layouts - all.invalid);  // every layout that passed the rules
    REQUIRE(all.first_fp8_refusal);
    const std::vector<config::EngineLimit> limits = config::engine_limits(as_fp8(all.best.front().job.spec));
    REQUIRE(limits.size() == 1);
    CHECK(all.first_fp8_refusal->key == "backend");
    CHECK(all.first_fp8_refusal->message == limits.front().message);
    // The same job on the CPU backend is tried in fp8: the backend alone kept it out.
    const plan::SearchResult on_cpu =
        plan::search_layouts(test::read_for_plan(test::kSmallLlama, 8, {"backend=cpu"}), h100, 3);
    CHECK(on_cpu.fp8_refused == 0);
  }
}

TEST_CASE("no fp8 on a GPU without FP8 tensor cores (A100)", "[fp8]") {
  const plan::HardwareProfile& a100 = *plan::find_hardware("a100-80g");
  REQUIRE_FALSE(a100.runs_fp8());
  // On the CPU backend no engine limit stands in the way: the device alone refuses it.
  for (const char* backend : {"backend=cpu", "backend=cuda"}) {
    INFO(backend);
    const config::LoadResult job = test::read_for_plan(test::kSmallLlama, 8, {backend, "cluster.gpu=a100-80g"});
    const plan::SearchResult all = plan::search_layouts(job, a100, kEverything);
    REQUIRE_FALSE(all.best.empty());
    CHECK(rows_in(all, Precision::Fp8) == 0);
    CHECK(all.fp8_refused == all.layouts - all.invalid);
    REQUIRE(all.first_fp8_refusal);
    CHECK(all.first_fp8_refusal->key == "train.precision");
  }
}

TEST_CASE("the layouts plan tries in fp8 are exactly those with no fp8 engine limit", "[fp8]") {
  // A small MoE job on 4 CPU ranks under the default order tp-cp-ep-dp-pp: its ep groups cross the tp
  // or cp groups in some layouts (engine_limits refuses fp8 there, at parallel.order), not in others.
  // With memory to spare every layout that passes the rules is ranked, in bf16 and where `run`
  // executes it in fp8.
  plan::HardwareProfile cpu = *plan::find_hardware("cpu");
  cpu.memory_bytes = 1e15;
  const config::LoadResult job = test::read_for_plan(
      test::kMixtral, 4,
      {"backend=cpu", "cluster.gpu=cpu", "cluster.gpus_per_node=4", "model.layers=2", "model.hidden=128",
       "model.heads=4", "model.kv_heads=2", "model.ffn_hidden=128", "model.vocab=512", "model.seq_len=64",
       "model.moe.experts=4", "parallel.ep=1", "train.global_batch=4", "parallel.sequence_parallel=true"});
  const plan::SearchResult all = plan::search_layouts(job, cpu, kEverything);
  CHECK(all.over_memory == 0);
  REQUIRE(all.first_fp8_refusal);
  CHECK(all.first_fp8_refusal->key == "parallel.order");

  std::map<std::vector<std::string>, bool> in_fp8;  // by keys but the precision
  for (const plan::RankedLayout& r : all.best)
    if (r.layout.precision == Precision::Fp8) in_fp8[keys_but_precision(r.layout, true)] = true;
  int tried = 0, refused = 0, tried_with_experts_split = 0;
  for (const plan::RankedLayout& r : all.best) {
    if (r.layout.precision == Precision::Fp8) {
      CHECK(config::engine_limits(r.job.spec).empty());  // `run` executes every fp8 row
      continue;
    }
    REQUIRE(r.layout.precision == Precision::Bf16);
    CHECK(config::engine_limits(r.job.spec).empty());
    const bool runs = config::engine_limits(as_fp8(r.job.spec)).empty();
    INFO("tp " << r.layout.tp << " cp " << r.layout.cp << " ep " << r.layout.ep << " zero " << r.layout.zero);
    CHECK(in_fp8.count(keys_but_precision(r.layout, true)) == (runs ? 1u : 0u));
    CHECK(plan::fp8_refusal(r.job.spec, cpu).has_value() == !runs);
    ++(runs ? tried : refused);
    if (runs && r.layout.ep > 1) ++tried_with_experts_split;
  }
  CHECK(tried > 0);
  CHECK(refused > 0);
  CHECK(tried_with_experts_split > 0);  // ep over data-parallel ranks, or ep = tp: fp8 runs
}

TEST_CASE("with a GPU's FP8 rate the bounded search ranks fp8 exactly as estimating every layout", "[fp8]") {
  // A backend: cpu job timed for cluster.gpu h100-sxm is one the engine runs in fp8 today: the H100's
  // rates (at peak x 60% and from the built-in profile, bf16 times x the datasheet's ratio) are what
  // plan ranks GPU jobs by once `run` executes fp8 there.
  const plan::HardwareProfile& h100 = *plan::find_hardware("h100-sxm");
  plan::HardwareProfile with_profile = h100;
  with_profile.measured = plan::builtin_profile(h100);
  const plan::HardwareProfile& profiled = with_profile;
  for (const plan::HardwareProfile* hw : {&h100, &profiled}) {
    INFO((hw->measured ? "built-in profile" : "peak x 60%"));
    const config::LoadResult job = test::read_for_plan(test::kSmallLlama, 8, {"backend=cpu"});
    const plan::SearchResult all = plan::search_layouts(job, *hw, kEverything);
    CHECK(all.fp8_refused == 0);
    CHECK(rows_in(all, Precision::Fp8) > 0);
    for (const plan::RankedLayout& r : all.best) CHECK(r.bound_s <= r.estimate.step_time_s);
    for (const int k : {1, 5, 10}) {
      const plan::SearchResult top = plan::search_layouts(job, *hw, k);
      CHECK(top.estimated < all.estimated / 2);  // the bound prunes
      REQUIRE(top.best.size() == static_cast<std::size_t>(k));
      for (std::size_t i = 0; i < top.best.size(); ++i) {
        CHECK(plan::layout_assignments(top.best[i].layout, false) == plan::layout_assignments(all.best[i].layout, false));
        CHECK(top.best[i].estimate.step_time_s == all.best[i].estimate.step_time_s);
      }
    }
  }
}
