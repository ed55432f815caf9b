// plan::fp8_refusal asks the checks that refuse an fp8 job -- the device's FP8 tensor cores, the
// engine's limits that fp8 adds, cuBLASLt's shapes on a GPU -- and nothing of its own.
#include "engine/plan/fp8_refusal.h"

#include <catch2/catch.hpp>

#include "engine/config/engine_limits.h"
#include "tests/plan/jobs.h"

using namespace ptrain;

TEST_CASE("fp8_refusal: the device, then the limits fp8 adds, whatever the job's own precision", "[fp8]") {
  const plan::HardwareProfile& cpu = *plan::find_hardware("cpu");
  const plan::HardwareProfile& h100 = *plan::find_hardware("h100-sxm");
  const plan::HardwareProfile& a100 = *plan::find_hardware("a100-80g");
  for (const char* precision : {"train.precision=bf16", "train.precision=fp32", "train.precision=fp8"}) {
    INFO(precision);
    const config::JobSpec on_cpu = test::load_job(test::kSmallLlama, {"backend=cpu", precision}).spec;
    CHECK_FALSE(plan::fp8_refusal(on_cpu, cpu));
    CHECK_FALSE(plan::fp8_refusal(on_cpu, h100));  // backend: cpu runs on the CPU, whatever cluster.gpu
    CHECK(plan::fp8_refusal(on_cpu, a100)->key == "train.precision");
    const config::JobSpec on_gpu = test::load_job(test::kSmallLlama, {"backend=cuda", precision}).spec;
    CHECK(plan::fp8_refusal(on_gpu, h100)->key == "backend");
    CHECK(plan::fp8_refusal(on_gpu, a100)->key == "train.precision");
  }
  // A limit the job has in bf16 as well (MoE with tp > 1 needs sequence parallelism) is not fp8's:
  // `run` refuses that job in any precision, and plan warns of it in what it writes.
  const config::JobSpec moe = test::load_job(test::kMixtral, {"backend=cpu", "parallel.sequence_parallel=false",
                                                               "parallel.ep=1", "parallel.tp=2"},
                                             16)
                                  .spec;
  REQUIRE(config::engine_limits(moe).size() == 1);
  CHECK_FALSE(plan::fp8_refusal(moe, cpu));
}
