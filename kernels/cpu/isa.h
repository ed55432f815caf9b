// Runtime instruction-set dispatch for the compute-bound CPU kernels (attention, GELU/SwiGLU,
// cross-entropy, AdamW). The project builds for baseline x86-64 (SSE2); these kernels are also
// compiled for AVX2+FMA and AVX-512 and the best one this CPU supports runs (4-9x faster on
// attention's block products). PTRAIN_CPU_ISA=generic|avx2|avx512 caps the choice (tests run the
// generic path this way; a request beyond the CPU falls back to what it has).
//
// Results: within one machine every run, thread count and layout gives the same bits; across
// ISAs they differ by rounding (vector width of reductions, FMA contraction), as across GPUs.
#pragma once

namespace ptrain::kernels::cpu {

enum class Isa { Generic, Avx2, Avx512 };

// Detected once (thread-safe), then constant.
Isa cpu_isa();

// The cap PTRAIN_CPU_ISA names ("generic", "avx2", "avx512"), or false for any other value (the
// commands refuse it: exit 2). Unset is no cap.
bool valid_isa_cap(const char* value);
const char* to_string(Isa isa);

}  // namespace ptrain::kernels::cpu

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PTRAIN_CPU_MULTIVERSION_X86 1
#else
#define PTRAIN_CPU_MULTIVERSION_X86 0
#endif

// PTRAIN_CPU_MULTIVERSION(name, body, (params...), (args...)) defines `void name(params...)` that
// calls `body(args...)`, a [[gnu::always_inline]] function, compiled for the ISA cpu_isa() picks.
// Everything `body` calls must be always_inline too (vec_math.h is) to get the wider vectors.
#if PTRAIN_CPU_MULTIVERSION_X86
#define PTRAIN_CPU_MULTIVERSION(name, body, params, args)                                                 \
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512dq,avx2,avx,fma,bmi,bmi2")]] void name##_avx512 params { \
    body args;                                                                                            \
  }                                                                                                       \
  [[gnu::target("avx2,avx,fma,bmi,bmi2")]] void name##_avx2 params {                                      \
    body args;                                                                                            \
  }                                                                                                       \
  void name##_generic params {                                                                            \
    body args;                                                                                            \
  }                                                                                                       \
  void name params {                                                                                      \
    switch (::ptrain::kernels::cpu::cpu_isa()) {                                                          \
      case ::ptrain::kernels::cpu::Isa::Avx512:                                                           \
        name##_avx512 args;                                                                               \
        return;                                                                                           \
      case ::ptrain::kernels::cpu::Isa::Avx2:                                                             \
        name##_avx2 args;                                                                                 \
        return;                                                                                           \
      case ::ptrain::kernels::cpu::Isa::Generic:                                                          \
        break;                                                                                            \
    }                                                                                                     \
    name##_generic args;                                                                                  \
  }
#else
#define PTRAIN_CPU_MULTIVERSION(name, body, params, args) \
  void name params {                                      \
    body args;                                            \
  }
#endif
