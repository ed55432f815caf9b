// Hardware profiles: the published numbers each one carries.
#include "engine/plan/hardware.h"

#include <catch2/catch.hpp>

using namespace ptrain;

TEST_CASE("known profiles") {
  CHECK(plan::hardware_names() == std::vector<std::string>{"h100-sxm", "h200", "a100-80g", "cpu"});
  const plan::HardwareProfile* h100 = plan::find_hardware("h100-sxm");
  REQUIRE(h100 != nullptr);
  CHECK(h100->memory_bytes == 80e9);
  CHECK(h100->peak_flops(config::Precision::Bf16) == 989e12);
  CHECK(h100->peak_flops(config::Precision::Fp32) == 67e12);
  CHECK(h100->hbm_bytes_per_s == 3.35e12);
  CHECK(h100->link_bytes_per_s(false) == 450e9);
  CHECK(h100->link_bytes_per_s(true) == 50e9);
  CHECK(h100->link_latency_s(true) > h100->link_latency_s(false));
  CHECK(plan::find_hardware("h200")->memory_bytes == 141e9);
  CHECK(plan::find_hardware("a100-80g")->peak_flops_bf16 == 312e12);
  CHECK(plan::find_hardware("cpu")->memory_bytes == 24.0 * (1 << 30));
}

TEST_CASE("unknown profile") {
  CHECK(plan::find_hardware("h100") == nullptr);
  CHECK(plan::find_hardware("") == nullptr);
}
