// The built-in profile: the compiled-in profiles/h100-sxm.json, a GPU's with a datasheet entry and
// a checked accuracy, as it is for the H100, carried for the other GPUs, none for the CPU.
#include "engine/plan/builtin_profile.h"

#include <catch2/catch.hpp>

#include "engine/plan/profile_transfer.h"

using namespace ptrain;

TEST_CASE("the built-in profile is the H100's, carried to the other GPUs") {
  const auto h100 = plan::builtin_profile(*plan::find_hardware("h100-sxm"));
  REQUIRE(h100 != nullptr);
  CHECK(h100->built_in);
  REQUIRE(plan::measured_hardware(*h100) != nullptr);
  CHECK(plan::measured_hardware(*h100)->name == "h100-sxm");
  CHECK_FALSE(h100->transfer.has_value());
  CHECK(h100->accuracy.has_value());  // checked against runs on its GPU
  CHECK(h100->calibration.has_value());
  CHECK(h100->gemm.count("bf16") == 1);

  const auto a100 = plan::builtin_profile(*plan::find_hardware("a100-80g"));
  REQUIRE(a100 != nullptr);
  REQUIRE(a100->transfer.has_value());
  CHECK(a100->transfer->to == "a100-80g");
  CHECK(a100->gemm.at("bf16").forward_s[0] == Approx(h100->gemm.at("bf16").forward_s[0] * 989.0 / 312.0));
  CHECK(plan::builtin_profile(*plan::find_hardware("h200"))->transfer->to == "h200");

  CHECK(plan::builtin_profile(*plan::find_hardware("cpu")) == nullptr);
}
