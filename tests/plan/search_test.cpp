// `ptrain plan`'s search: the bounded search ranks exactly as estimating every layout would, and
// every layout it ranks is what `validate` says of the job with that layout's keys.
#include "engine/plan/search.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "engine/plan/builtin_profile.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

namespace {

const plan::HardwareProfile& h100() {
  return *plan::find_hardware("h100-sxm");
}

// The H100 as plan sees a GPU job without cluster.profile: timed from the built-in profile.
plan::HardwareProfile h100_profiled() {
  plan::HardwareProfile hw = h100();
  hw.measured = plan::builtin_profile(hw);
  return hw;
}

bool same_layout(const plan::Layout& a, const plan::Layout& b) {
  return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp && a.ep == b.ep && a.schedule == b.schedule &&
         a.virtual_stages == b.virtual_stages && a.layers_per_stage == b.layers_per_stage &&
         a.micro_batch == b.micro_batch && a.sequence_parallel == b.sequence_parallel &&
         a.recompute == b.recompute && a.zero == b.zero && a.max_in_flight == b.max_in_flight &&
         a.cp_comm == b.cp_comm && a.precision == b.precision;
}

constexpr int kEverything = 1 << 20;  // a `top` no search reaches: nothing is bounded out

}  // namespace

TEST_CASE("the bounded search ranks exactly as estimating every fitting layout") {
  // At peak x 60% and from the built-in profile (the default on GPUs), whose op-by-op times the
  // bound must stay below too. Mixtral with a smaller batch (fewer micro-batch sizes) keeps the
  // exhaustive run short.
  const plan::HardwareProfile profiled = h100_profiled();
  const std::vector<std::pair<const char*, const char*>> jobs = {{test::kSmallLlama, "16"},
                                                                 {test::kMixtral, "64"}};
  for (const plan::HardwareProfile* hw : {&h100(), &profiled}) {
    for (const auto& [yaml, batch] : jobs) {
      const config::LoadResult job = test::read_for_plan(yaml, 16, {std::string("train.global_batch=") + batch});
      const plan::SearchResult all = plan::search_layouts(job, *hw, kEverything);
      INFO(job.spec.name << (hw->measured ? " (built-in profile)" : " (peak x 60%)") << ": "
                         << all.best.size() << " fitting layouts");
      REQUIRE(all.best.size() > 20);
      CHECK(all.estimated == static_cast<int>(all.best.size()));
      CHECK(std::is_sorted(all.best.begin(), all.best.end(), [](const auto& a, const auto& b) {
        return a.estimate.step_time_s < b.estimate.step_time_s;
      }));
      // The bound is one: never above the step time. Where every rank of a stage holds the same
      // (dense models) it is the step time itself, which is what makes the pruning effective.
      for (const plan::RankedLayout& ranked : all.best) {
        CHECK(ranked.bound_s <= ranked.estimate.step_time_s);
        if (job.spec.model.arch == config::Arch::Llama) CHECK(ranked.bound_s == ranked.estimate.step_time_s);
      }
      // Pipelines that fit only under a cap on their microbatches in flight are ranked too.
      if (job.spec.model.arch == config::Arch::Mixtral)
        CHECK(std::any_of(all.best.begin(), all.best.end(),
                          [](const plan::RankedLayout& r) { return r.layout.max_in_flight > 0; }));
      for (int k : {1, 3, 5, 10}) {
        const plan::SearchResult top = plan::search_layouts(job, *hw, k);
        INFO("top " << k << ": " << top.estimated << " estimated");
        CHECK(top.estimated < all.estimated / 2);  // the bound prunes
        REQUIRE(top.best.size() == static_cast<size_t>(k));
        for (size_t i = 0; i < top.best.size(); ++i) {
          CHECK(same_layout(top.best[i].layout, all.best[i].layout));
          CHECK(top.best[i].estimate.step_time_s == all.best[i].estimate.step_time_s);
        }
        CHECK(top.layouts == all.layouts);
        CHECK(top.layouts == top.invalid + top.over_memory + top.fitting);
        CHECK(top.invalid > 0);
      }
    }
  }
}

TEST_CASE("every ranked layout is what validate reports for the job with its keys") {
  const config::LoadResult job = test::read_for_plan(test::kMixtral, 16);
  const plan::SearchResult result = plan::search_layouts(job, h100(), 8);
  REQUIRE(result.best.size() == 8);
  for (const plan::RankedLayout& ranked : result.best) {
    const std::vector<std::string> keys = plan::layout_assignments(ranked.layout, true);
    CHECK(std::count(keys.begin(), keys.end(), "parallel.ep=" + std::to_string(ranked.layout.ep)) == 1);
    const config::LoadResult loaded = test::load_job(test::kMixtral, keys, 16);
    const plan::Estimate est = plan::estimate(loaded, h100());
    CHECK(est.diags.ok());
    CHECK(est.step_time_s == ranked.estimate.step_time_s);
    CHECK(est.peak_memory_bytes() == ranked.estimate.peak_memory_bytes());
    CHECK(est.peak_memory_bytes() <= h100().memory_bytes);
    CHECK(loaded.spec.parallel.dp * loaded.spec.parallel.tp * loaded.spec.parallel.cp *
              loaded.spec.parallel.pp ==
          16);
  }
}

TEST_CASE("the least recompute that fits, and ZeRO stages only where ranks shard") {
  const config::LoadResult job = test::read_for_plan(test::kLlama3_70b, 64);
  const plan::SearchResult result = plan::search_layouts(job, h100(), 40);
  REQUIRE(!result.best.empty());
  for (const plan::RankedLayout& ranked : result.best) {
    const config::ParallelSpec& p = ranked.job.spec.parallel;
    if (p.dp * p.cp == 1) CHECK(ranked.layout.zero == 0);
    if (ranked.layout.recompute == config::Recompute::None) continue;
    // One step less recompute would not have fit.
    plan::Layout less = ranked.layout;
    less.recompute = static_cast<config::Recompute>(static_cast<int>(less.recompute) - 1);
    const config::LoadResult loaded = config::rederive(job, plan::with_layout(job.spec, less));
    REQUIRE(loaded.ok());
    CHECK(plan::estimate(loaded, h100()).peak_memory_bytes() > h100().memory_bytes);
  }
}

TEST_CASE("ZeRO 2 and 3 only where the pipeline completes gradients per microbatch") {
  // A schedule that splits W (zb-h1, zbv, dualpipev), or pp > 1 with a tied embedding, allows ZeRO 1
  // at most (config::most_zero_stage): plan ranked such layouts, which validate refuses, and with a
  // tied embedding wrote one and failed ("internal error").
  for (const bool tied : {false, true}) {
    const config::LoadResult job = test::read_for_plan(
        test::kSmallLlama, 16, {"train.global_batch=16", std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
    const plan::SearchResult all = plan::search_layouts(job, h100(), kEverything);
    INFO((tied ? "tied" : "untied") << ": " << all.best.size() << " ranked");
    REQUIRE(!all.best.empty());
    bool zero_above_1 = false;
    for (const plan::RankedLayout& ranked : all.best) {
      const plan::Layout& l = ranked.layout;
      CHECK(l.zero <= config::most_zero_stage(l.schedule, l.pp, tied));
      CHECK(config::rederive(job, plan::with_layout(job.spec, l)).ok());
      zero_above_1 = zero_above_1 || l.zero > 1;
    }
    CHECK(zero_above_1);  // where the pipeline allows them, ZeRO 2 and 3 are still searched
  }
}

TEST_CASE("layers that do not split evenly go to the inner stages, and sequence parallel needs tp") {
  const config::LoadResult job =
      test::read_for_plan(test::kSmallLlama, 8, {"model.layers=10", "parallel.sequence_parallel=true"});
  const plan::SearchResult result = plan::search_layouts(job, h100(), kEverything);
  bool seen_uneven = false;
  for (const plan::RankedLayout& ranked : result.best) {
    const plan::Layout& l = ranked.layout;
    CHECK(l.sequence_parallel == (l.tp > 1));
    if (l.pp * l.virtual_stages == 4) {
      CHECK(l.layers_per_stage == std::vector<int>{2, 3, 3, 2});
      seen_uneven = true;
    }
    if (l.pp * l.virtual_stages == 8) CHECK(l.layers_per_stage == std::vector<int>{1, 2, 2, 1, 1, 1, 1, 1});
    if (l.pp * l.virtual_stages == 2) CHECK(l.layers_per_stage.empty());
  }
  CHECK(seen_uneven);
}

TEST_CASE("nothing fits on a device too small: the layout with the least memory is reported") {
  const config::LoadResult job = test::read_for_plan(test::kSmallLlama, 8);
  plan::HardwareProfile tiny = h100();
  tiny.memory_bytes = 1e6;
  const plan::SearchResult result = plan::search_layouts(job, tiny, 10);
  CHECK(result.best.empty());
  CHECK(result.fitting == 0);
  CHECK(result.over_memory == result.layouts - result.invalid);
  REQUIRE(result.least_memory);
  CHECK(result.least_memory_bytes > tiny.memory_bytes);
  CHECK(result.least_memory->recompute == config::Recompute::Full);
}
