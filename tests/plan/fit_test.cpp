// Over-memory: the error, its breakdown, and the nearest layout that fits.
#include "engine/plan/fit.h"

#include <catch2/catch.hpp>

#include "engine/model/param_registry.h"
#include "engine/plan/estimate.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

namespace {

const plan::HardwareProfile& h100() {
  return *plan::find_hardware("h100-sxm");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("Llama 3 70B at tp 1, pp 1 on H100: an error with the breakdown and the nearest fit") {
  // 64 ranks, dp 64, zero 0: 16 bytes x 70.6B params alone are 1.1 TB per GPU.
  const config::LoadResult job = test::load_job(test::kLlama3_70b);
  const plan::Estimate est = plan::estimate(job, h100());
  REQUIRE(est.diags.errors.size() == 1);
  const config::Diagnostic& error = est.diags.errors.front();
  INFO(error.format());
  CHECK(contains(error.message, "exceeds"));
  CHECK(contains(error.message, "h100-sxm"));
  for (const char* part : {"params", "grads", "optimizer", "activations", "comm buffers"})
    CHECK(contains(error.message, part));
  // zero 3 alone leaves ~180 GB of activations, full recompute alone 1.1 TB of model states
  CHECK(est.nearest_fit == "--set parallel.zero=3 --set train.recompute=full");
  CHECK(contains(error.fix, est.nearest_fit));
  CHECK(error.key == "parallel.zero");
  CHECK(error.line == 5);  // where `parallel` is written (zero is inside its flow mapping)

  // and the suggestion is right: applying it gives a valid estimate
  const config::LoadResult fixed =
      test::load_job(test::kLlama3_70b, {"parallel.zero=3", "train.recompute=full"});
  const plan::Estimate after = plan::estimate(fixed, h100());
  CHECK(after.diags.ok());
}

TEST_CASE("peak_memory agrees with the estimate") {
  const config::LoadResult job = test::load_job(test::kSmallLlama, {"parallel.pp=4", "parallel.tp=2"}, 8);
  const plan::Estimate est = plan::estimate(job, h100());
  const plan::PeakMemory peak = plan::peak_memory(job.spec, model::build_registry(job.spec.model));
  CHECK(peak.memory.total() == est.peak_memory_bytes());
  CHECK(peak.pp_rank == est.heaviest().pp_rank);
}

TEST_CASE("one change is preferred over two, and zero before recompute") {
  // A small model on a tiny device: 4 ranks, dp 4; zero 3 divides model states by 4.
  const config::LoadResult job = test::load_job(test::kSmallLlama, {}, 4);
  const plan::PeakMemory peak = plan::peak_memory(job.spec, model::build_registry(job.spec.model));
  plan::HardwareProfile tiny = h100();
  const plan::MemoryBreakdown& m = peak.memory;
  tiny.memory_bytes = m.total() - (m.params + m.grads + m.optimizer) * 0.5;  // needs zero >= 2's savings
  const auto fit = plan::nearest_fitting_layout(job, tiny);
  REQUIRE(fit);
  REQUIRE(fit->changes.size() == 1);
  CHECK(fit->changes[0].first == "parallel.zero");
  CHECK(fit->peak.memory.total() <= tiny.memory_bytes);
}

TEST_CASE("nothing nearby fits: say so") {
  const config::LoadResult job = test::load_job(test::kLlama3_70b, {}, 1);
  const plan::Estimate est = plan::estimate(job, h100());
  REQUIRE(!est.diags.ok());
  CHECK(est.nearest_fit.empty());
  CHECK(contains(est.diags.errors.front().fix, "more GPUs"));
}

TEST_CASE("an interleaved pipeline that holds too much: a cap on the microbatches in flight fits first") {
  // configs/published/llama3-405b-8192-gpus.yaml without its cap: 24 microbatches in flight on
  // stage 1, 84.9 GiB; zero 2 alone still holds them all, a cap of 18 (3/4 of 24) fits.
  const config::LoadResult job = test::load_file("configs/published/llama3-405b-8192-gpus.yaml",
                                                 {"schedule.max_in_flight=0"});
  const plan::Estimate est = plan::estimate(job, h100());
  REQUIRE(est.diags.errors.size() == 1);
  CHECK(est.peak_inflight == 24);
  CHECK(est.nearest_fit == "--set schedule.max_in_flight=18");
  const plan::Estimate after = plan::estimate(
      test::load_file("configs/published/llama3-405b-8192-gpus.yaml", {"schedule.max_in_flight=18"}), h100());
  CHECK(after.diags.ok());
  CHECK(after.peak_inflight == 18);
  CHECK(after.max_in_flight == 18);
  CHECK(after.step_time_s > est.step_time_s);  // the price: more bubble
  CHECK(after.step_time_s < 1.1 * est.step_time_s);
}

TEST_CASE("a larger pp keeps a cap it allows: the job's own cap raised to the new pp's least") {
  // Interleaved x2 at pp 2, dp 2 with the least cap (2); pp 4 (dp 1) halves the model states as zero 3
  // does and holds 3 microbatches of 2 layers against 2 of 4, so it is the first neighbour that fits
  // a device of its size. Its least cap is 3: the job's 2 would have rejected it.
  const std::vector<std::string> interleaved{"schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2",
                                             "cluster.gpus_per_node=1", "cluster.nodes=4"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), interleaved.begin(), interleaved.end());
    return test::load_job(test::kSmallLlama, sets, 4);
  };
  const config::LoadResult job = with({"parallel.pp=2", "schedule.max_in_flight=2"});
  const config::LoadResult deeper = with({"parallel.pp=4", "schedule.max_in_flight=3"});
  const plan::PeakMemory then = plan::peak_memory(deeper.spec, model::build_registry(deeper.spec.model));
  plan::HardwareProfile tiny = h100();
  tiny.memory_bytes = then.memory.total();
  const auto fit = plan::nearest_fitting_layout(job, tiny);
  REQUIRE(fit);
  CHECK(fit->set_line() == "--set schedule.max_in_flight=3 --set parallel.pp=4");
  CHECK(fit->peak.memory.total() == then.memory.total());
}
