// Argument checks shared by the CPU op entries. A wrong dtype, a missing buffer or a negative size
// is a programming error in the caller: it throws std::invalid_argument naming the op and the
// argument (library code never aborts). Checks run once per call, before any parallel region, so
// nothing is thrown from inside OpenMP.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/buffer.h"

namespace ptrain::kernels::cpu {

[[noreturn]] inline void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("cpu ") + op + ": " + what);
}

inline void require(bool ok, const char* op, const char* what) {
  if (!ok) fail(op, what);
}

// `b` must hold `want` elements and be non-null (null is accepted when it is to hold no element,
// `count` == 0, as for empty tensors).
inline void require_buf(const char* op, const char* name, Buf b, DType want, std::int64_t count = 1) {
  if (!b && count > 0) fail(op, std::string("'") + name + "' is null");
  if (b.dtype != want) {
    fail(op, std::string("'") + name + "' must be " + to_string(want) + ", got " + to_string(b.dtype));
  }
}

// `b` may be null (an optional argument); if given it must hold `want` elements.
inline void require_opt(const char* op, const char* name, Buf b, DType want) {
  if (b) require_buf(op, name, b, want);
}

inline void require_sizes(const char* op, std::initializer_list<std::int64_t> sizes) {
  for (std::int64_t s : sizes) {
    if (s < 0) fail(op, "negative size " + std::to_string(s));
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
