// CPU feature detection for isa.h: the best of AVX-512 / AVX2+FMA / generic this CPU runs, capped
// by PTRAIN_CPU_ISA (a debugging and testing override).
#include "kernels/cpu/isa.h"

#include <cstdlib>
#include <optional>
#include <string_view>

namespace ptrain::kernels::cpu {
namespace {

Isa detect_hardware() {
#if PTRAIN_CPU_MULTIVERSION_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
    return Isa::Avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
    return Isa::Avx2;
  }
#endif
  return Isa::Generic;
}

std::optional<Isa> parse_cap(std::string_view value) {
  if (value == "generic") return Isa::Generic;
  if (value == "avx2") return Isa::Avx2;
  if (value == "avx512") return Isa::Avx512;
  return std::nullopt;
}

Isa detect() {
  const Isa hardware = detect_hardware();
  const char* env = std::getenv("PTRAIN_CPU_ISA");
  const std::optional<Isa> cap = env != nullptr ? parse_cap(env) : std::nullopt;
  return cap && static_cast<int>(*cap) < static_cast<int>(hardware) ? *cap : hardware;
}

}  // namespace

bool valid_isa_cap(const char* value) { return value == nullptr || parse_cap(value).has_value(); }

Isa cpu_isa() {
  static const Isa isa = detect();
  return isa;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::Generic:
      return "generic";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace ptrain::kernels::cpu
