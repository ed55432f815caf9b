// validate's estimate and plan's search of jobs with many microbatches, whose schedules they model
// from short samples (pipeline::ScheduleModel), against the same numbers from the full schedule:
// the pipeline's makespan and bubble, what each stage holds, ZeRO 3's gathers; and the search's
// microbatch sizes up to a global batch near INT_MAX.
#include <catch2/catch.hpp>

#include "engine/model/param_registry.h"
#include "engine/pipeline/schedule_model.h"
#include "engine/plan/estimate.h"
#include "engine/plan/fit.h"
#include "engine/plan/search.h"
#include "engine/plan/step_time.h"
#include "tests/plan/jobs.h"

using namespace ptrain;
using Catch::Detail::Approx;

namespace {

const plan::HardwareProfile& h100() {
  return *plan::find_hardware("h100-sxm");
}

constexpr double kRounding = 1e-9;

void check_params(const plan::RankParams& got, const plan::RankParams& want) {
  CHECK(got.total() == want.total());
  CHECK(got.zero3_gathered == want.zero3_gathered);
  CHECK(got.zero3_gather_calls == want.zero3_gather_calls);
  CHECK(got.zero3_expert_gathered == want.zero3_expert_gathered);
  CHECK(got.zero3_expert_gather_calls == want.zero3_expert_gather_calls);
}

}  // namespace

TEST_CASE("a job of thousands of microbatches: its estimate is the full schedule's") {
  struct Case {
    const char* yaml;
    std::vector<std::string> overrides;
    int world;
  };
  const std::vector<Case> cases = {
      {test::kSmallLlama, {"parallel.pp=8", "train.global_batch=4096", "parallel.zero=3"}, 16},
      {test::kSmallLlama, {"parallel.pp=4", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2",
                           "train.global_batch=8192"}, 8},
      {test::kSmallLlama, {"parallel.pp=4", "schedule.max_in_flight=3", "train.global_batch=8192"}, 8},
      {test::kSmallLlama, {"parallel.pp=8", "schedule.kind=zb-h1", "train.global_batch=4096", "parallel.zero=1"}, 16},
      {test::kSmallLlama, {"parallel.pp=4", "schedule.kind=zbv", "train.global_batch=4096"}, 8},
      {test::kMixtral, {"parallel.pp=4", "parallel.zero=3", "train.global_batch=32768"}, 64},
  };
  for (const Case& c : cases) {
    const config::LoadResult job = test::load_job(c.yaml, c.overrides, c.world);
    REQUIRE(job.ok());
    const config::JobSpec& spec = job.spec;
    INFO(config::to_string(spec.schedule.kind) << " pp " << spec.parallel.pp << " microbatches "
                                               << spec.train.microbatches);
    const pipeline::ScheduleModel sampled(spec), full = pipeline::ScheduleModel::in_full(spec);
    REQUIRE(sampled.sampled());
    REQUIRE_FALSE(full.sampled());

    const plan::Estimate est = plan::estimate(job, h100());
    const pipeline::SimResult sim = full.simulate(plan::stage_op_costs(spec, h100()));
    CHECK(est.pipeline_s == Approx(sim.makespan).epsilon(kRounding));
    CHECK(est.bubble_fraction == Approx(sim.bubble.fraction).epsilon(kRounding).margin(kRounding));
    CHECK(est.max_in_flight == full.max_in_flight());

    const std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
    const std::vector<plan::RankParams> got = plan::stage_params(spec, sampled, registry),
                                        want = plan::stage_params(spec, full, registry);
    for (std::size_t r = 0; r < want.size(); ++r) check_params(got[r], want[r]);
    const plan::PeakMemory peak = plan::peak_memory(spec, registry), peak_full = plan::peak_memory(spec, want, full.held());
    CHECK(peak.memory.total() == peak_full.memory.total());
    CHECK(peak.pp_rank == peak_full.pp_rank);
    CHECK(est.peak_memory_bytes() >= peak_full.memory.total());  // other tp and ep ranks can only add
  }
}

TEST_CASE("the search tries every micro_batch up to a global batch near INT_MAX") {
  // micro_batch doubled past global_batch / dp in an int: it overflowed, and the next division by
  // it was by zero
  for (const char* batch : {"1073741824", "2147483646"}) {
    config::LoadOptions read;
    read.overrides = {std::string("train.global_batch=") + batch, "cluster.nodes=1", "cluster.gpus_per_node=2"};
    read.derive = false;
    config::LoadResult job = config::load_string(test::kSmallLlama, "small.yaml", read);
    REQUIRE(job.ok());
    job.spec.world = 2;
    const plan::SearchResult result = plan::search_layouts(job, h100(), 1);
    // dp 1 and 2, micro_batch 1 .. 2^30 each
    CHECK(result.layouts > 2 * 30);
    CHECK(result.best.empty());
    INFO(result.first_rule_broken->format());
    CHECK(result.invalid + result.over_memory == result.layouts);
  }
}
