#include "engine/plan/hardware.h"

#include <array>

namespace ptrain::plan {
namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;

// Sources and the reading of each number: hardware.h.
const std::array<HardwareProfile, 4>& profiles() {
  static const std::array<HardwareProfile, 4> kProfiles = {{
      {"h100-sxm", 80 * kGB, 989 * kTera, 67 * kTera, 1979 * kTera, 3.35e12, 450 * kGB, 50 * kGB, 5 * kMicro, 10 * kMicro, 64 * kGB,
       77 * kGB},
      {"h200", 141 * kGB, 989 * kTera, 67 * kTera, 1979 * kTera, 4.8e12, 450 * kGB, 50 * kGB, 5 * kMicro, 10 * kMicro, 64 * kGB,
       77 * kGB},
      {"a100-80g", 80 * kGB, 312 * kTera, 19.5 * kTera, 0, 2.0e12, 300 * kGB, 25 * kGB, 5 * kMicro, 10 * kMicro,
       32 * kGB, 51 * kGB},
      {"cpu", 24 * kGiB, 4e11, 4e11, 4e11, 20 * kGB, 10 * kGB, 1.25 * kGB, 20 * kMicro, 50 * kMicro, 10 * kGB, 20 * kGB,
       true},
  }};
  return kProfiles;
}

}  // namespace

double HardwareProfile::peak_flops(config::Precision precision) const {
  return config::bf16_working(precision) ? peak_flops_bf16 : peak_flops_fp32;
}

const HardwareProfile* find_hardware(std::string_view name) {
  for (const HardwareProfile& p : profiles()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> hardware_names() {
  std::vector<std::string> names;
  for (const HardwareProfile& p : profiles()) names.push_back(p.name);
  return names;
}

}  // namespace ptrain::plan
