// PTRAIN_CUDNN_ATTENTION: where the CUDA backend's BF16 attention goes to cuDNN's fused kernels
// (kernels/cuda/cudnn_attention.h) and which backward it takes there; read by that backend when it
// runs and by validate, which counts the memory each one takes (plan::cudnn_attention_scratch_bytes).
// Host-only and header-only, so that both read the variable with one parser.
//   auto (unset or empty): for each shape and direction, whichever of cuDNN (its fast backward) and
//                          ptrain's own kernels ran faster at the shape's first call (on an H100
//                          ours win at short sequences: T 256, B 8, 16 heads)
//   fast:                  cuDNN wherever it has a plan; dQ summed in an fp32 buffer with atomics
//                          (bf16 bits may differ run to run; so may auto's)
//   deterministic:         cuDNN wherever it has a plan, dP staged in a B x Hq x Tq x Tk bf16
//                          workspace (bitwise repeatable)
//   off:                   ptrain's own attention kernels
#pragma once

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace ptrain::kernels {

enum class CudnnAttentionMode { Off, Auto, Fast, Deterministic };

inline constexpr const char* kCudnnAttentionVariable = "PTRAIN_CUDNN_ATTENTION";

// The variable's value as a mode (nullptr or empty: Auto); nullopt for anything else.
inline std::optional<CudnnAttentionMode> parse_cudnn_attention_mode(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return CudnnAttentionMode::Auto;
  if (v == "fast") return CudnnAttentionMode::Fast;
  if (v == "off") return CudnnAttentionMode::Off;
  if (v == "deterministic") return CudnnAttentionMode::Deterministic;
  return std::nullopt;
}

// From the environment; an unknown value throws std::invalid_argument (`ptrain run` and `validate`
// refuse it with exit 2 before any of this runs: app/job_loading.cpp).
inline CudnnAttentionMode cudnn_attention_mode() {
  const char* value = std::getenv(kCudnnAttentionVariable);
  const std::optional<CudnnAttentionMode> mode = parse_cudnn_attention_mode(value);
  if (!mode)
    throw std::invalid_argument(std::string(kCudnnAttentionVariable) + " must be auto, fast, deterministic or off (got '" +
                                value + "')");
  return *mode;
}

// The variable's value: "off", "auto", "fast", "deterministic".
inline const char* to_string(CudnnAttentionMode mode) {
  switch (mode) {
    case CudnnAttentionMode::Off:
      return "off";
    case CudnnAttentionMode::Auto:
      return "auto";
    case CudnnAttentionMode::Fast:
      return "fast";
    case CudnnAttentionMode::Deterministic:
      return "deterministic";
  }
  return "?";
}

}  // namespace ptrain::kernels
