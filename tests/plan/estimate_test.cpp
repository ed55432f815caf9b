// The whole estimate on loaded jobs: shape of the report, pipeline numbers from the simulator, the
// direction of every trade-off, and the time it takes on the largest job.
#include "engine/plan/estimate.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "engine/model/param_registry.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

namespace {

const plan::HardwareProfile& h100() {
  return *plan::find_hardware("h100-sxm");
}

plan::Estimate estimate_of(const std::string& yaml, std::vector<std::string> overrides = {},
                           std::optional<int> world = std::nullopt) {
  return plan::estimate(test::load_job(yaml, std::move(overrides), world), h100());
}

double peak_memory(const plan::Estimate& est) {
  return est.ranks.at(static_cast<size_t>(est.max_memory_rank)).memory.total();
}

}  // namespace

TEST_CASE("report of a small job") {
  const plan::Estimate est = estimate_of(test::kSmallLlama, {"parallel.tp=2", "parallel.pp=2"}, 8);
  CHECK(est.diags.ok());
  CHECK(est.world == 8);
  CHECK(est.degrees.dp == 2);
  for (const char* axis : {"tp", "pp", "dp", "cp", "ep"}) CHECK(est.groups.count(axis) == 1);
  CHECK(est.groups.at("tp") == grid::GroupList{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(est.groups.at("pp") == grid::GroupList{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(est.ranks.size() == 4);  // (pp, tp) positions
  CHECK(est.ranks[0].rank == 0);
  CHECK(est.ranks[3].rank == 5);  // pp 1, tp 1
  CHECK(est.hardware == "h100-sxm");
  CHECK(est.microbatches == 8);
  CHECK(est.tokens_per_step == 16 * 128);

  const auto registry =
      model::build_registry(test::load_job(test::kSmallLlama, {"parallel.tp=2"}, 2).spec.model);
  CHECK(est.tensors.size() == registry.size());
  std::int64_t total = 0;
  for (const auto& p : registry) total += p.numel();
  CHECK(est.params_total == total);
  CHECK(est.params_active == total);
  CHECK(est.tensors[1].name == "model.layers.0.input_layernorm.weight");
  CHECK(est.tensors[2].local_shape == std::vector<std::int64_t>{128, 256});  // q_proj rows / tp

  // ranks at the same pp rank hold the same amount; the two pp ranks together hold everything once per tp
  // slice
  CHECK(est.ranks[0].params == est.ranks[1].params);
  CHECK(est.step_time_s > 0);
  CHECK(est.mfu > 0);
  CHECK(est.mfu < 1);
  CHECK(est.step_time_s == Approx(est.pipeline_s + est.dp_exposed_s + est.optimizer_s));
  CHECK(!est.layer_activations.empty());
}

TEST_CASE("the step's breakdown adds up to the step, part by part") {
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"parallel.pp=4"}, {"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.pp=2"},
        {"parallel.cp=2", "parallel.zero=3"}, {"parallel.pp=2", "schedule.kind=zb-h1", "train.recompute=full"}}) {
    const plan::Estimate est = estimate_of(test::kSmallLlama, layout, 4);
    const plan::Estimate::StepBreakdown& b = est.breakdown;
    INFO(layout.front());
    CHECK(b.gemm_s + b.attention_s + b.memory_bound_s + b.tp_s + b.cp_s + b.ep_s + b.dp_s + b.bubble_s +
              b.optimizer_s ==
          Approx(est.step_time_s));
    CHECK(b.gemm_s > 0);
    CHECK(b.bubble_s >= 0);
    CHECK(est.compute_model == "peak x 60%");  // no profile: every FLOP at the same rate, counted as GEMM
  }
  CHECK(estimate_of(test::kSmallLlama, {"parallel.tp=2"}, 4).breakdown.tp_s > 0);
  CHECK(estimate_of(test::kSmallLlama, {"parallel.pp=4"}, 4).breakdown.bubble_s > 0);
}

TEST_CASE("one bubble: the share and the seconds are the same rank's, the rank computing most") {
  // The Pipeline line's share and the breakdown's seconds once came from two ranks (the idlest and
  // the busiest): 94% beside 5.5 ms on a pp 2 GPT-2 whose head outweighs its first stage.
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"parallel.pp=4"},
        {"parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2"},
        {"parallel.pp=4", "schedule.kind=zb-h1"}, {"parallel.pp=2", "train.global_batch=4"}}) {
    const plan::Estimate est = estimate_of(test::kSmallLlama, layout, 4);
    INFO(layout.back());
    CHECK(est.breakdown.bubble_s > 0);
    CHECK(est.breakdown.bubble_s == Approx(est.bubble_fraction * est.pipeline_s));
    REQUIRE(est.idle_fraction.size() == static_cast<size_t>(est.degrees.pp));
    // the critical rank idles least (it computes most, and every rank ends by the makespan)
    CHECK(est.bubble_fraction == Approx(est.idle_fraction[static_cast<size_t>(est.bubble_rank)]));
    for (const double idle : est.idle_fraction) CHECK(est.bubble_fraction <= idle + 1e-12);
  }
}

TEST_CASE("peak in-flight microbatches come from simulating the schedule") {
  const plan::Estimate est = estimate_of(test::kSmallLlama, {"parallel.pp=4"}, 4);  // 16 microbatches
  REQUIRE(est.ranks.size() == 4);
  CHECK(est.ranks[0].peak_inflight == 4);  // 1F1B: stage 0 holds pp microbatches
  CHECK(est.ranks[3].peak_inflight == 1);
  CHECK(est.peak_inflight == 4);
  CHECK(est.max_memory_rank == 0);

  const plan::Estimate gpipe = estimate_of(test::kSmallLlama, {"parallel.pp=4", "schedule.kind=gpipe"}, 4);
  CHECK(gpipe.ranks[0].peak_inflight == 16);  // GPipe keeps every microbatch
  CHECK(peak_memory(gpipe) > peak_memory(est));
}

TEST_CASE("trade-offs move the estimate the right way") {
  // Llama 3 70B as in configs/: tp 8 in a node, pp 4, SP, selective recompute, zero 1.
  const std::vector<std::string> layout = {"parallel.tp=8", "parallel.pp=4",
                                           "parallel.sequence_parallel=true", "parallel.zero=1",
                                           "train.recompute=selective"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), layout.begin(), layout.end());
    return extra;
  };
  SECTION("more data parallelism at a fixed global batch: a shorter step") {
    const plan::Estimate dp2 = estimate_of(test::kLlama3_70b, with({}));                    // 64 GPUs
    const plan::Estimate dp4 = estimate_of(test::kLlama3_70b, with({"cluster.nodes=16"}));  // 128 GPUs
    REQUIRE(dp4.degrees.dp == 2 * dp2.degrees.dp);
    CHECK(dp4.step_time_s < 0.6 * dp2.step_time_s);
    CHECK(dp4.mfu == Approx(dp2.mfu).epsilon(0.05));
  }
  SECTION("the bubble grows with pp at a fixed number of microbatches") {
    const plan::Estimate pp2 = estimate_of(test::kSmallLlama, {"parallel.pp=2", "train.global_batch=8"}, 2);
    const plan::Estimate pp4 = estimate_of(test::kSmallLlama, {"parallel.pp=4", "train.global_batch=8"}, 4);
    REQUIRE(pp2.microbatches == pp4.microbatches);
    CHECK(pp4.bubble_fraction > pp2.bubble_fraction);
    CHECK(pp2.bubble_fraction > 0);
  }
  SECTION("interleaving and zero-bubble schedules shrink the bubble") {
    const plan::Estimate plain = estimate_of(test::kLlama3_70b, with({"train.global_batch=64"}));
    const plan::Estimate interleaved = estimate_of(
        test::kLlama3_70b,
        with({"train.global_batch=64", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=5"}));
    const plan::Estimate zb =
        estimate_of(test::kLlama3_70b, with({"train.global_batch=64", "schedule.kind=zb-h1"}));
    CHECK(interleaved.bubble_fraction < plain.bubble_fraction);
    CHECK(interleaved.step_time_s < plain.step_time_s);
    CHECK(zb.bubble_fraction < plain.bubble_fraction);
    CHECK(zb.peak_inflight == plain.peak_inflight);  // ZB-H1 keeps 1F1B's memory
  }
  SECTION("recompute: less activation memory, more hardware FLOPs") {
    const plan::Estimate none = estimate_of(test::kLlama3_70b, {"parallel.tp=8", "parallel.pp=8"});
    const plan::Estimate selective =
        estimate_of(test::kLlama3_70b, {"parallel.tp=8", "parallel.pp=8", "train.recompute=selective"});
    const plan::Estimate full =
        estimate_of(test::kLlama3_70b, {"parallel.tp=8", "parallel.pp=8", "train.recompute=full"});
    auto activations = [](const plan::Estimate& e) { return e.ranks[0].memory.activations; };
    CHECK(activations(selective) < activations(none));
    CHECK(activations(full) * 2 < activations(selective));  // without SP the kept input is the whole sbh
    CHECK(full.hardware_flops_per_step > none.hardware_flops_per_step);
    CHECK(full.flops_per_step == none.flops_per_step);
    CHECK(full.step_time_s > none.step_time_s);
  }
  SECTION("sequence parallelism divides activations") {
    const plan::Estimate off = estimate_of(test::kLlama3_70b, {"parallel.tp=8", "parallel.pp=8"});
    const plan::Estimate on =
        estimate_of(test::kLlama3_70b, {"parallel.tp=8", "parallel.pp=8", "parallel.sequence_parallel=true"});
    CHECK(on.ranks[0].memory.activations < 0.5 * off.ranks[0].memory.activations);
  }
  SECTION("higher ZeRO stages shrink model states") {
    double previous = 1e300;
    for (int zero = 0; zero <= 3; ++zero) {
      const plan::Estimate e = estimate_of(test::kSmallLlama, {"parallel.zero=" + std::to_string(zero)}, 8);
      const plan::MemoryBreakdown& m = e.ranks[0].memory;
      CHECK(m.params + m.grads + m.optimizer < previous);
      previous = m.params + m.grads + m.optimizer;
    }
  }
}

TEST_CASE("mixtral: expert groups, expert-dp sharding, all-to-all") {
  const plan::Estimate est = estimate_of(test::kMixtral);
  CHECK(est.diags.ok());
  CHECK(est.world == 64);
  CHECK(est.groups.at("ep").size() == 8);
  CHECK(est.groups.at("ep").front().size() == 8);
  CHECK(est.params_total == 46'702'792'704);
  CHECK(est.params_active < est.params_total / 3);
  CHECK(est.comm_bytes_per_step.at("ep").total() > 0);
  // ep 8 over tp*dp = 64: every rank holds one expert of each of the 32 layers, half of the
  // attention, embedding and head, and the norms and router whole
  const std::int64_t expert = 3LL * 4096 * 14336;
  const std::int64_t attention = 2LL * 4096 * 4096 + 2LL * 1024 * 4096;
  const std::int64_t replicated = 2 * 4096 + 8 * 4096;
  const std::int64_t per_rank = 32000LL * 4096 + 32 * (attention / 2 + replicated + expert) + 4096;
  for (const plan::RankEstimate& r : est.ranks) CHECK(r.params == per_rank);
  CHECK(est.mfu > 0);
  CHECK(est.mfu < 1);
}

TEST_CASE("Llama 3.1 405B on 16,384 H100: fits, and the estimate is fast") {
  const config::LoadResult job = test::load_job(test::kLlama31_405b);
  REQUIRE(job.spec.world == 16384);
  const auto start = std::chrono::steady_clock::now();
  const plan::Estimate est = plan::estimate(job, h100());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 0.5);  // the release target is 50 ms, measured by bench/; loose here for Debug builds
  CHECK(est.diags.ok());
  CHECK(est.params_total == 405'853'388'800);
  CHECK(est.ranks.size() == 16 * 8);
  CHECK(est.degrees.dp == 128);
  CHECK(est.groups.at("dp").size() == 128);
  CHECK(est.comm_bytes_per_step.at("tp").inter_node == 0);
  CHECK(est.comm_bytes_per_step.at("dp").inter_node > 0);
  CHECK(est.comm_bytes_per_step.at("pp").inter_node > 0);
  CHECK(est.mfu > 0.2);  // Meta reports 38-43% BF16 MFU for this layout
  CHECK(est.mfu < 0.6);
  CHECK(peak_memory(est) < 80e9);
}
