// Argument checks shared by the CPU op entries, with the rules and messages of the CUDA side
// (kernels/cuda/args.cuh). A wrong dtype, a missing buffer or a negative size is a programming error
// in the caller: it throws std::invalid_argument naming the op and the argument (library code never
// aborts). Checks run once per call, before any parallel region, so nothing is thrown from inside
// OpenMP.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/buffer.h"

namespace ptrain::kernels::cpu {

[[noreturn]] inline void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("cpu ") + op + ": " + what);
}

inline void require(bool ok, const char* op, const char* what) {
  if (!ok) fail(op, what);
}

inline void require_sizes(const char* op, std::initializer_list<std::int64_t> sizes) {
  for (std::int64_t s : sizes) {
    if (s < 0) fail(op, "negative size " + std::to_string(s));
  }
}

// `b` must be non-null (null is accepted when it is to hold no element, `count` == 0, as for empty
// tensors).
inline void require_nonnull(const char* op, const char* name, Buf b, std::int64_t count) {
  if (!b && count > 0) fail(op, std::string("'") + name + "' is null");
}

// `b` must be non-null (unless empty) and of dtype `want`.
inline void require_buf(const char* op, const char* name, Buf b, DType want, std::int64_t count = 1) {
  require_nonnull(op, name, b, count);
  if (b.dtype != want) {
    fail(op, std::string("'") + name + "' must be " + to_string(want) + ", got " + to_string(b.dtype));
  }
}

// `b` must be non-null (unless empty) and hold floating-point values: F32 or BF16.
inline void require_float(const char* op, const char* name, Buf b, std::int64_t count = 1) {
  require_nonnull(op, name, b, count);
  if (b.dtype != DType::F32 && b.dtype != DType::BF16) {
    fail(op, std::string("'") + name + "' must be f32 or bf16, got " + to_string(b.dtype));
  }
}

// Optional arguments (may be null): checked only when given.
inline void require_opt(const char* op, const char* name, Buf b, DType want) {
  if (b) require_buf(op, name, b, want);
}
inline void require_opt_float(const char* op, const char* name, Buf b) {
  if (b) require_float(op, name, b);
}

// `b` (if given) must have the dtype of `ref`, the argument that fixes the op's element type.
inline void require_same(const char* op, const char* name, Buf b, const char* ref_name, Buf ref) {
  if (b && b.dtype != ref.dtype) {
    fail(op, std::string("'") + name + "' must have the dtype of '" + ref_name + "' (" +
                 to_string(ref.dtype) + "), got " + to_string(b.dtype));
  }
}

// The rule of the ops whose buffers share one element type: every named buffer non-null (unless
// n == 0), F32 or BF16, and all of the first one's dtype. Also checks n >= 0.
inline void require_same_floats(const char* op, std::int64_t n,
                                std::initializer_list<std::pair<const char*, Buf>> bufs) {
  require_sizes(op, {n});
  const auto& first = *bufs.begin();
  for (const auto& [name, b] : bufs) {
    require_float(op, name, b, n);
    require_same(op, name, b, first.first, first.second);
  }
}

// Typed views (after the checks above).
inline float* f32(Buf b) {
  return b.as<float>();
}
inline const float* cf32(Buf b) {
  return b.as<const float>();
}
inline const std::int32_t* ci32(Buf b) {
  return b.as<const std::int32_t>();
}

}  // namespace ptrain::kernels::cpu
