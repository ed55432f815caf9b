// Helpers for the op tests (ggml test-backend-ops style): deterministic random inputs, NaN poison,
// Buf views of host vectors, bf16 rounding, an abs + rel*|ref| comparison, and central finite
// differences.
#pragma once

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/buffer.h"
#include "kernels/ops.h"

namespace ptrain::kernels::test {

inline constexpr DType F32 = DType::F32;
inline constexpr DType BF16 = DType::BF16;

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using IVec = std::vector<std::int32_t>;

inline const Ops& ops() {
  return cpu_ops();
}

// Uniform in [lo, hi), deterministic for a seed. Defaults keep values away from zero-ish scales.
inline Vec random_vec(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline IVec random_ints(std::size_t n, std::uint32_t seed, int lo, int hi) {  // [lo, hi]
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  IVec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Vec nan_vec(std::size_t n) {
  return Vec(n, std::numeric_limits<float>::quiet_NaN());
}

inline Buf buf(const Vec& v) {
  return Buf{const_cast<float*>(v.data()), DType::F32};
}
inline Buf buf(const IVec& v) {
  return Buf{const_cast<std::int32_t*>(v.data()), DType::I32};
}
// One F32 value on the host (the output of sum and sum_squares on the CPU backend).
inline Buf scalar(float& v) {
  return Buf{&v, DType::F32};
}
inline Buf none() {
  return Buf{};
}

// x as stored in bf16 (rounded to nearest even) and read back.
inline float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

// The values as an op sees them when stored as `t` (BF16: rounded).
inline Vec as_dtype(Vec v, DType t) {
  if (t == DType::BF16) {
    for (float& x : v) x = round_bf16(x);
  }
  return v;
}

// A host tensor stored as F32 or BF16 (the values rounded once), for the CPU ops in either dtype.
class HostTensor {
 public:
  HostTensor(const Vec& values, DType dtype) : dtype_(dtype) {
    if (dtype == DType::BF16) {
      for (float x : values) bf16_.push_back(f32_to_bf16(x));
    } else {
      f32_ = values;
    }
  }

  Buf buf() { return dtype_ == DType::BF16 ? Buf{bf16_.data(), DType::BF16} : Buf{f32_.data(), DType::F32}; }

  // The values, widened to float.
  Vec values() const {
    Vec out = f32_;
    for (std::uint16_t x : bf16_) out.push_back(bf16_to_f32(x));
    return out;
  }

  // The stored bit patterns, for bitwise comparisons (-0 and NaN payloads count).
  std::vector<std::uint32_t> bits() const {
    std::vector<std::uint32_t> out;
    for (float x : f32_) out.push_back(std::bit_cast<std::uint32_t>(x));
    for (std::uint16_t x : bf16_) out.push_back(x);
    return out;
  }

 private:
  DType dtype_;
  Vec f32_;
  std::vector<std::uint16_t> bf16_;
};

// Where the fused residual add + norm ops write the sum x_out: a buffer of its own or, as ops.h
// allows, over a or over b.
enum class XOut { Separate, AliasA, AliasB };
inline constexpr XOut kXOuts[] = {XOut::Separate, XOut::AliasA, XOut::AliasB};
inline const char* to_string(XOut x) {
  return x == XOut::Separate ? "separate" : x == XOut::AliasA ? "aliasing a" : "aliasing b";
}

inline DVec to_double(const Vec& v) {
  return DVec(v.begin(), v.end());
}

// Every got[i] equal to ref[i] (infinities of one sign included) or within atol + rtol * |ref[i]|
// (NaN fails). Reports the count and the worst element.
template <typename Got, typename Ref>
void check_close(const Got& got, const Ref& ref, double atol, double rtol, const std::string& what) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0;
  std::size_t worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double r = static_cast<double>(ref[i]);
    const double err = std::fabs(g - r);
    const double tol = atol + rtol * std::fabs(r);
    const bool ok = g == r || err <= tol;  // false for NaN; inf - inf is NaN, hence g == r
    if (!ok) {
      ++bad;
      const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad > 0) {
    FAIL_CHECK(what << ": " << bad << " of " << got.size() << " elements off; worst [" << worst << "] got "
                    << got[worst] << " want " << ref[worst] << " (atol " << atol << ", rtol " << rtol << ")");
  } else {
    SUCCEED(what);
  }
}

// sum_i out[i] * r[i] in double: the scalar loss of the gradient checks.
inline double weighted_sum(const Vec& out, const Vec& r) {
  double s = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

// Up to max_count indices of [0, n), all of them when n <= max_count, else a deterministic sample.
inline std::vector<std::size_t> sample_indices(std::size_t n, std::size_t max_count, std::uint32_t seed) {
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  if (n <= max_count) return idx;
  std::mt19937 gen(seed);
  std::shuffle(idx.begin(), idx.end(), gen);
  idx.resize(max_count);
  return idx;
}

// Central differences of loss() with respect to x[i] for each i in idx, in fp32 inputs; the step is
// the actual difference of the two rounded perturbed values.
inline DVec numeric_grad(Vec& x, const std::vector<std::size_t>& idx, const std::function<double()>& loss,
                         float eps = 1e-3f) {
  DVec g(idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const std::size_t i = idx[k];
    const float saved = x[i];
    const float up = saved + eps;
    const float down = saved - eps;
    x[i] = up;
    const double lp = loss();
    x[i] = down;
    const double lm = loss();
    x[i] = saved;
    g[k] = (lp - lm) / (static_cast<double>(up) - static_cast<double>(down));
  }
  return g;
}

inline Vec gather(const Vec& v, const std::vector<std::size_t>& idx) {
  Vec out(idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) out[k] = v[idx[k]];
  return out;
}

// Finite-difference check of an analytic gradient `analytic` (same layout as x).
inline void check_grad(const std::string& what, Vec& x, const Vec& analytic,
                       const std::function<double()>& loss, std::size_t max_count = 400, double atol = 5e-3,
                       double rtol = 1e-2) {
  const auto idx = sample_indices(x.size(), max_count, 1234);
  const DVec numeric = numeric_grad(x, idx, loss);
  check_close(gather(analytic, idx), numeric, atol, rtol, what + " (finite differences)");
}

inline Vec times(const Vec& v, float f) {
  Vec out(v);
  for (float& x : out) x *= f;
  return out;
}

inline Vec plus(const Vec& a, const Vec& b) {
  Vec out(a);
  for (std::size_t i = 0; i < a.size(); ++i) out[i] += b[i];
  return out;
}

}  // namespace ptrain::kernels::test
