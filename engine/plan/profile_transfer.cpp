#include "engine/plan/profile_transfer.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>
#include <vector>

namespace ptrain::plan {
namespace {

void scale(std::vector<double>& seconds, double by) {
  for (double& s : seconds) s *= by;
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

}  // namespace

const HardwareProfile* measured_hardware(const MeasuredProfile& profile) {
  if (profile.backend == "cpu") return find_hardware("cpu");
  // What the driver calls each entry's GPU, and the names of its variants with other datasheets
  // (PCIe and NVL boards, the 40 GB A100, the GH200 superchip).
  struct Name {
    const char* hardware;
    const char* has;
    std::vector<const char*> lacks;
  };
  static const std::vector<Name> names = {{"h100-sxm", "H100", {"PCIe", "NVL"}},
                                          {"h200", "H200", {"GH200", "NVL"}},
                                          {"a100-80g", "A100", {"PCIe", "40GB"}}};
  const std::string device = upper(profile.device);  // nvidia-smi writes "PCIE", the driver "PCIe"
  auto contains = [&](const char* text) { return device.find(upper(text)) != std::string::npos; };
  for (const Name& n : names)
    if (contains(n.has) && std::none_of(n.lacks.begin(), n.lacks.end(), contains))
      return find_hardware(n.hardware);
  return nullptr;
}

MeasuredProfile transfer_profile(const MeasuredProfile& profile, const HardwareProfile& from,
                                 const HardwareProfile& to) {
  if (from.device_is_host() || to.device_is_host())
    throw std::invalid_argument("a profile carries between GPUs only (from " + from.name + " to " + to.name +
                                ")");
  MeasuredProfile out = profile;
  const double bf16_ratio = from.peak_flops_bf16 / to.peak_flops_bf16;
  const double fp32_ratio = from.peak_flops_fp32 / to.peak_flops_fp32;
  auto compute_ratio = [&](const std::string& element) {
    if (element == kFp8GemmElement) return from.peak_flops_fp8 / to.peak_flops_fp8;
    return element == "bf16" ? bf16_ratio : fp32_ratio;
  };
  // An FP8 table goes by the FP8 rates, and nowhere without FP8 tensor cores (fp8 is refused there).
  if (from.peak_flops_fp8 <= 0 || to.peak_flops_fp8 <= 0) out.gemm.erase(kFp8GemmElement);
  for (auto& [element, g] : out.gemm) {
    const double by = compute_ratio(element);
    scale(g.forward_s, by), scale(g.input_grad_s, by), scale(g.weight_grad_s, by);
  }
  for (auto& [element, tables] : out.attention)
    for (AttentionTable& a : tables)
      scale(a.forward_s, compute_ratio(element)), scale(a.backward_s, compute_ratio(element));
  const double memory_ratio = from.hbm_bytes_per_s / to.hbm_bytes_per_s;
  for (auto& [family, points] : out.memory)
    for (MemoryPoint& p : points) p.forward_s *= memory_ratio, p.backward_s *= memory_ratio;
  out.collectives.reset();
  out.accuracy.reset();
  out.transfer = Transfer{from.name, to.name, bf16_ratio, fp32_ratio, memory_ratio};
  return out;
}

}  // namespace ptrain::plan
