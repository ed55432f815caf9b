#include "engine/plan/profile_transfer.h"

#include <stdexcept>
#include <vector>

namespace ptrain::plan {
namespace {

void scale(std::vector<double>& seconds, double by) {
  for (double& s : seconds) s *= by;
}

}  // namespace

const HardwareProfile* measured_hardware(const MeasuredProfile& profile) {
  if (profile.backend == "cpu") return find_hardware("cpu");
  for (const auto& [marker, name] : {std::pair{"H100", "h100-sxm"}, {"H200", "h200"}, {"A100", "a100-80g"}})
    if (profile.device.find(marker) != std::string::npos) return find_hardware(name);
  return nullptr;
}

MeasuredProfile transfer_profile(const MeasuredProfile& profile, const HardwareProfile& from,
                                 const HardwareProfile& to) {
  if (from.device_is_host() || to.device_is_host())
    throw std::invalid_argument("a profile carries between GPUs only (from " + from.name + " to " + to.name + ")");
  MeasuredProfile out = profile;
  auto compute_ratio = [&](const std::string& element) {
    return element == "bf16" ? from.peak_flops_bf16 / to.peak_flops_bf16 : from.peak_flops_fp32 / to.peak_flops_fp32;
  };
  for (auto& [element, g] : out.gemm) {
    const double by = compute_ratio(element);
    scale(g.forward_s, by), scale(g.input_grad_s, by), scale(g.weight_grad_s, by);
  }
  for (auto& [element, tables] : out.attention)
    for (AttentionTable& a : tables) scale(a.forward_s, compute_ratio(element)), scale(a.backward_s, compute_ratio(element));
  const double memory_ratio = from.hbm_bytes_per_s / to.hbm_bytes_per_s;
  for (auto& [family, points] : out.memory)
    for (MemoryPoint& p : points) p.forward_s *= memory_ratio, p.backward_s *= memory_ratio;
  out.collectives.reset();
  out.accuracy.reset();
  out.transfer = Transfer{from.name, to.name, compute_ratio("bf16"), memory_ratio};
  return out;
}

}  // namespace ptrain::plan
