// A profile carried from the GPU it measured to another: which GPU a profile names, each table
// scaled by its datasheet ratio (dense peak for GEMM and attention, HBM bandwidth for memory-bound
// ops), an op's time scaled by exactly that ratio, and what is dropped or refused.
#include "engine/plan/profile_transfer.h"

#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

using namespace ptrain;
using Catch::Matchers::Contains;

namespace {

plan::MeasuredProfile h100_like() {
  plan::MeasuredProfile p;
  p.device = "NVIDIA H100 80GB HBM3 (cuda device 0)", p.backend = "cuda", p.date = "2026-11-27";
  for (const char* element : {"f32", "bf16"}) {
    plan::GemmTable g{{64, 4096}, {64, 4096}, {64, 4096}, {}, {}, {}};
    for (int i = 0; i < 8; ++i)
      g.forward_s.push_back(1e-3 * (i + 1)), g.input_grad_s.push_back(2e-3 * (i + 1)),
          g.weight_grad_s.push_back(3e-3 * (i + 1));
    p.gemm[element] = g;
    plan::AttentionTable a;
    a.seq = {256, 4096}, a.forward_s = {1e-4, 1e-2}, a.backward_s = {3e-4, 3e-2};
    p.attention[element] = {a};
  }
  p.memory["norm/bf16"] = {{1e6, 1e-5, 2e-5}, {1e8, 5e-5, 1e-4}};
  p.memory["optimizer/f32"] = {{4e6, 1e-4, 1e-4}};
  p.collectives = plan::CollectiveTable{8, "nccl", {{"all_reduce", {{1e6, 1e-5}}}}};
  p.calibration = plan::Calibration{"reference", 0.04, 0.042, 0.94, ""};
  p.accuracy = plan::Accuracy{6, 0.05, 0.08, "2026-11-27", "one GPU"};
  return p;
}

}  // namespace

TEST_CASE("a profile names the hardware it measured") {
  plan::MeasuredProfile p = h100_like();
  auto named = [&](const char* device) {
    p.device = device;
    const plan::HardwareProfile* hw = plan::measured_hardware(p);
    return hw == nullptr ? std::string("(none)") : hw->name;
  };
  CHECK(named("NVIDIA H100 80GB HBM3 (cuda device 0)") == "h100-sxm");
  CHECK(named("NVIDIA A100-SXM4-80GB (cuda device 3)") == "a100-80g");
  CHECK(named("NVIDIA H200 (cuda device 0)") == "h200");
  // Boards of other datasheets are none of the entries: read as measured
  CHECK(named("NVIDIA H100 PCIe") == "(none)");
  CHECK(named("NVIDIA H100 NVL") == "(none)");
  CHECK(named("NVIDIA A100-SXM4-40GB") == "(none)");
  CHECK(named("NVIDIA A100 80GB PCIe") == "(none)");
  CHECK(named("NVIDIA GH200 480GB") == "(none)");
  CHECK(named("NVIDIA L40S (cuda device 0)") == "(none)");
  p.backend = "cpu";
  CHECK(named("AMD EPYC 9654") == "cpu");
}

TEST_CASE("a transferred profile scales each table by its datasheet ratio") {
  const plan::MeasuredProfile h100 = h100_like();
  const plan::HardwareProfile& from = *plan::find_hardware("h100-sxm");
  const plan::HardwareProfile& to = *plan::find_hardware("a100-80g");
  const plan::MeasuredProfile a100 = plan::transfer_profile(h100, from, to);

  const double bf16 = 989.0 / 312.0, f32 = 67.0 / 19.5, hbm = 3.35 / 2.0;
  for (std::size_t i = 0; i < h100.gemm.at("bf16").forward_s.size(); ++i) {
    CHECK(a100.gemm.at("bf16").forward_s[i] == Approx(bf16 * h100.gemm.at("bf16").forward_s[i]));
    CHECK(a100.gemm.at("bf16").input_grad_s[i] == Approx(bf16 * h100.gemm.at("bf16").input_grad_s[i]));
    CHECK(a100.gemm.at("bf16").weight_grad_s[i] == Approx(bf16 * h100.gemm.at("bf16").weight_grad_s[i]));
    CHECK(a100.gemm.at("f32").forward_s[i] == Approx(f32 * h100.gemm.at("f32").forward_s[i]));
  }
  CHECK(a100.attention.at("bf16")[0].backward_s[1] == Approx(bf16 * 3e-2));
  CHECK(a100.attention.at("f32")[0].forward_s[0] == Approx(f32 * 1e-4));
  CHECK(a100.memory.at("norm/bf16")[1].backward_s == Approx(hbm * 1e-4));
  CHECK(a100.memory.at("norm/bf16")[1].bytes == 1e8);  // sizes are not times
  CHECK(a100.memory.at("optimizer/f32")[0].forward_s == Approx(hbm * 1e-4));

  // An op read from the carried tables costs the ratio times what it costs on the measured ones,
  // between grid points as on them.
  model::Op gemm;
  gemm.kind = model::OpKind::Gemm;
  gemm.gemm = {1000, 300, 2000, 1};
  const plan::OpSeconds measured = plan::op_seconds(h100, gemm, true), carried = plan::op_seconds(a100, gemm, true);
  CHECK(carried.forward == Approx(bf16 * measured.forward));
  CHECK(carried.weight_grad == Approx(bf16 * measured.weight_grad));

  // Not measured on the A100: the collectives (its link model times them) and the accuracy.
  CHECK_FALSE(a100.collectives.has_value());
  CHECK_FALSE(a100.accuracy.has_value());
  CHECK(a100.calibration->compute_scale == 0.94);  // the engine's overhead over its ops
  REQUIRE(a100.transfer.has_value());
  CHECK(a100.transfer->from == "h100-sxm");
  CHECK(a100.transfer->to == "a100-80g");
  CHECK(a100.transfer->bf16_ratio == Approx(bf16));
  CHECK(a100.transfer->fp32_ratio == Approx(f32));
  CHECK(a100.transfer->memory_ratio == Approx(hbm));
  CHECK_THAT(plan::expected_error(&a100), Contains("no run on a100-80g checked this profile") &&
                                              Contains("carried from h100-sxm") && Contains("Megatron-LM"));
  CHECK_FALSE(h100.transfer.has_value());
  // Only the transfers runs checked cite them: H100 to A100 (the published runs), H100 to H200.
  const plan::MeasuredProfile h200 = plan::transfer_profile(h100, from, *plan::find_hardware("h200"));
  CHECK(h200.gemm.at("bf16").forward_s == h100.gemm.at("bf16").forward_s);  // the same compute
  CHECK(h200.memory.at("norm/bf16")[0].forward_s == Approx(1e-5 * 3.35 / 4.8));
  CHECK_THAT(plan::expected_error(&h200), Contains("no run on h200 checked this profile") &&
                                              Contains("0.99-1.15") && Contains("nvidia-h200.json"));
  const plan::MeasuredProfile h200_to_a100 =
      plan::transfer_profile(h100, *plan::find_hardware("h200"), *plan::find_hardware("a100-80g"));
  CHECK_THAT(plan::expected_error(&h200_to_a100), Contains("no runs checked this transfer"));
  // A carried profile is never written: read back, it would be carried again.
  CHECK_THROWS_AS(plan::to_json(a100), std::logic_error);
}

TEST_CASE("an FP8 GEMM table is carried by the FP8 rates, and not to a GPU without FP8 tensor cores") {
  plan::MeasuredProfile h100 = h100_like();
  h100.gemm[plan::kFp8GemmElement] = h100.gemm.at("bf16");
  const plan::HardwareProfile& from = *plan::find_hardware("h100-sxm");
  const plan::HardwareProfile& h200 = *plan::find_hardware("h200");
  REQUIRE(h200.peak_flops_fp8 > 0);
  const plan::MeasuredProfile carried = plan::transfer_profile(h100, from, h200);
  const std::vector<double>& measured = h100.gemm.at("fp8").weight_grad_s;
  for (std::size_t i = 0; i < measured.size(); ++i)
    CHECK(carried.gemm.at("fp8").weight_grad_s[i] ==
          Approx(from.peak_flops_fp8 / h200.peak_flops_fp8 * measured[i]));
  CHECK(plan::transfer_profile(h100, from, *plan::find_hardware("a100-80g")).gemm.count("fp8") == 0);
}

TEST_CASE("a profile is never carried between a CPU and a GPU") {
  const plan::MeasuredProfile p = h100_like();
  CHECK_THROWS_WITH(plan::transfer_profile(p, *plan::find_hardware("h100-sxm"), *plan::find_hardware("cpu")),
                    Contains("between GPUs only"));
  CHECK_THROWS_AS(plan::transfer_profile(p, *plan::find_hardware("cpu"), *plan::find_hardware("a100-80g")),
                  std::invalid_argument);
}
