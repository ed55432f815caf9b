// Step-time pieces: the per-stage costs the simulator runs, exposed data-parallel time, the
// optimizer's memory-bound time.
#include "engine/plan/step_time.h"

#include <catch2/catch.hpp>

#include "engine/plan/traffic.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

namespace {

const plan::HardwareProfile& h100() {
  return *plan::find_hardware("h100-sxm");
}

}  // namespace

TEST_CASE("stage costs: one entry per virtual stage, backward = 2x forward compute") {
  const config::LoadResult job = test::load_job(
      test::kSmallLlama, {"parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2"}, 2);
  const pipeline::OpCosts costs = plan::stage_op_costs(job.spec, h100());
  REQUIRE(costs.forward.size() == 4);
  for (size_t v = 0; v < 4; ++v) {
    CHECK(costs.forward[v] > 0);
    // tp = 1, no experts: no comm inside a stage, so B and W are each exactly the forward compute
    CHECK(costs.backward[v] == Approx(costs.forward[v]));
    CHECK(costs.weight_grad[v] == Approx(costs.forward[v]));
  }
  CHECK(costs.forward[3] > costs.forward[1]);  // the LM head
  // one activation message: sbh bf16 over NVLink plus its latency
  CHECK(costs.p2p_seconds == Approx(128.0 * 256 * 2 / 450e9 + 5e-6));

  // at 60% of the bf16 peak
  const config::LoadResult single = test::load_job(test::kSmallLlama, {}, 1);
  const pipeline::OpCosts one = plan::stage_op_costs(single.spec, h100());
  REQUIRE(one.forward.size() == 1);
  CHECK(one.p2p_seconds == 0);
  // forward FLOPs of one sequence: 128 tokens x (2 N + 8 layers x 2 s a d)
  const double n = 8 * (256.0 * 256 + 2 * 128 * 256 + 256 * 256 + 3 * 256 * 512) + 1000 * 256;
  CHECK(one.forward[0] == Approx(128 * (2 * n + 8 * 2.0 * 128 * 256) / (989e12 * plan::kGemmEfficiency)));
}

TEST_CASE("full recompute lengthens backward, and tp collectives add to both directions") {
  const config::LoadResult plain = test::load_job(test::kSmallLlama, {"parallel.tp=2"}, 2);
  const config::LoadResult full =
      test::load_job(test::kSmallLlama, {"parallel.tp=2", "train.recompute=full"}, 2);
  const pipeline::OpCosts a = plan::stage_op_costs(plain.spec, h100());
  const pipeline::OpCosts b = plan::stage_op_costs(full.spec, h100());
  CHECK(b.forward[0] == a.forward[0]);
  CHECK(b.backward[0] > a.backward[0]);
  CHECK(a.backward[0] > a.weight_grad[0]);  // input-grad all-reduces
}

TEST_CASE("exposed data-parallel time") {
  const config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.zero=1"}, 4);
  plan::RankParams params;
  params.dense = 100'000'000;  // in 4 units of 25M: a collective each
  params.dense_units = 4;
  const plan::LinkTiers intra;
  const plan::DataParallelTraffic dp = plan::data_parallel_traffic(job.spec, params);
  const double bucket = 0.75 * 25e6 * 4 / 450e9 + 5e-6;  // one unit's fp32 reduce-scatter over 4 ranks
  const double gather = plan::seconds(dp.dense.param_gather_after_step, h100(), false);
  // a long backward hides all but the last unit's; the param all-gather after the step is exposed
  CHECK(plan::data_parallel_exposed_seconds(job.spec, h100(), params, intra, 10.0, 10.0) ==
        Approx(bucket + gather));
  // no backward to hide behind: the whole reduction
  CHECK(plan::data_parallel_exposed_seconds(job.spec, h100(), params, intra, 0.0, 0.0) ==
        Approx(4 * bucket + gather));
  // across nodes it takes longer
  plan::LinkTiers inter;
  inter.dp_cp = true;
  CHECK(plan::data_parallel_exposed_seconds(job.spec, h100(), params, inter, 0.0, 0.0) > 4 * bucket + gather);
  // collectives on the host (Gloo) block: nothing hides, however long the backward
  plan::HardwareProfile host = h100();
  host.host_collectives = true;
  CHECK(plan::data_parallel_exposed_seconds(job.spec, host, params, intra, 10.0, 10.0) == Approx(4 * bucket + gather));
}

TEST_CASE("ZeRO 3's gathers and the gradient reduction share the link: their sum beyond the compute is exposed") {
  // Each fits its own window here (the reduction behind the backward, the gathers behind the step),
  // but not both: the step is at least what the link carries (it was predicted below that).
  const config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.zero=3"}, 4);
  plan::RankParams params;
  params.dense = 100'000'000;
  params.dense_units = 4;
  params.zero3_gathered = 2 * params.dense;  // forward and backward gather every unit
  params.zero3_gather_calls = 2 * params.dense_units;
  const plan::LinkTiers intra;
  const plan::DataParallelTraffic dp = plan::data_parallel_traffic(job.spec, params);
  const double reduction = plan::seconds(dp.dense.grad_reduction, h100(), false);
  const double gathers = plan::seconds(dp.dense.param_gather_zero3, h100(), false);
  REQUIRE(gathers > 0);
  const double busy = std::max(reduction, gathers) * 1.01;  // each alone would hide
  const double exposed = plan::data_parallel_exposed_seconds(job.spec, h100(), params, intra, busy, busy);
  CHECK(exposed == Approx(reduction + gathers - busy));
  CHECK(busy + exposed >= reduction + gathers);
  // With compute enough for both, only the last unit's reduction shows.
  const double ample = 2 * (reduction + gathers);
  plan::Collective last_unit = dp.dense.grad_reduction.front();
  last_unit.count = 1;
  CHECK(plan::data_parallel_exposed_seconds(job.spec, h100(), params, intra, ample, ample) ==
        Approx(plan::seconds(last_unit, h100(), false)));
}

TEST_CASE("optimizer step: every state read and written once, over the rank's ZeRO shard") {
  plan::RankParams params;
  params.dense = 1'000'000'000;
  const config::LoadResult z0 = test::load_job(test::kSmallLlama, {"parallel.zero=0"}, 4);
  const config::LoadResult z1 = test::load_job(test::kSmallLlama, {"parallel.zero=1"}, 4);
  // bf16 weights, fp32 gradients, fp32 master + m + v: 18 bytes per parameter
  CHECK(plan::optimizer_seconds(z0.spec, h100(), params, 0.0) == Approx(2.0 * 18 * 1e9 / 3.35e12));
  CHECK(plan::optimizer_seconds(z1.spec, h100(), params, 0.0) == Approx(2.0 * 18 * 1e9 / 4 / 3.35e12));
}

TEST_CASE("offloaded optimizer step: the gradients' copy, then what the next forward does not hide") {
  plan::RankParams params;
  params.dense = 1'000'000'000;
  params.dense_units = 10;
  const config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.zero=1", "parallel.offload=optimizer"}, 4);
  REQUIRE(job.ok());
  const double owned = 1e9 / 4;
  const double down = 4 * owned / 64e9, up = 2 * owned / 64e9;
  // AdamW on the host: fp32 weights, gradients, m, v in and three out, plus the bf16 copy (4 in, 2 out)
  const double host = (28 + 6) * owned / 77e9;
  CHECK(plan::optimizer_seconds(job.spec, h100(), params, 0.0) == Approx(down + host + up));
  // a forward longer than the update hides all of it but the first unit's
  CHECK(plan::optimizer_seconds(job.spec, h100(), params, 10.0) == Approx(down + (host + up) / 10));
  CHECK(plan::optimizer_seconds(job.spec, h100(), params, 0.5 * (host + up)) == Approx(down + 0.5 * (host + up)));
  // on a CPU rank the host's AdamW is the device's
  plan::HardwareProfile cpu = *plan::find_hardware("cpu");
  const config::LoadResult zero1 = test::load_job(test::kSmallLlama, {"parallel.zero=1"}, 4);
  const double on_device = plan::optimizer_seconds(zero1.spec, cpu, params, 0.0);
  CHECK(plan::optimizer_seconds(job.spec, cpu, params, 0.0) == Approx(on_device + 6 * owned / 10e9));
}
