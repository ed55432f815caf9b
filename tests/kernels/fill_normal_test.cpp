// fill_normal (kernels/philox_normal.h): the samples are the header's scalar function on every
// instruction set (this file is compiled without FMA contraction, like the kernel; ctest runs it on
// generic, AVX2 and AVX-512), within one float rounding of the textbook Box-Muller through libm, a
// standard normal, and the rows form the same as row by row. The CUDA kernel's bits against these:
// tests/kernels/cuda/cuda_ops_test.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>

#include "engine/runtime/philox.h"
#include "kernels/ops.h"
#include "kernels/philox_normal.h"
#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels;
using namespace ptrain::kernels::test;

namespace {

constexpr std::uint64_t kKey = 0x243F6A8885A308D3ull;

// The textbook sample: u1 = (r0 + 1) 2^-32, u2 = r1 2^-32, sqrt(-2 log u1) cos(2 pi u2) in libm's double.
float libm_normal(std::uint64_t key, std::uint64_t index) {
  const auto r = ptrain::runtime::philox4x32(
      {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u},
      {static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32)});
  const double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace

TEST_CASE("fill_normal gives the header's samples on this instruction set, from any first index",
          "[fill_normal]") {
  for (const std::uint64_t first : {std::uint64_t{0}, (std::uint64_t{1} << 32) - 3}) {
    const std::int64_t n = 100003;
    Vec x = nan_vec(n);
    cpu_ops().fill_normal(buf(x), 1, n, kKey, first, 0, 0.02f);
    for (std::int64_t i = 0; i < n; ++i)
      REQUIRE(x[i] == 0.02f * philox::normal_at(kKey, first + static_cast<std::uint64_t>(i)));
  }
}

TEST_CASE("fill_normal's rows are its one-row draws at the row stride", "[fill_normal]") {
  const std::int64_t rows = 37, cols = 1001;
  const std::uint64_t first = 500, stride = 4096;
  Vec whole = nan_vec(rows * cols), row = nan_vec(cols);
  cpu_ops().fill_normal(buf(whole), rows, cols, kKey, first, stride, 1.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    cpu_ops().fill_normal(buf(row), 1, cols, kKey, first + r * stride, 0, 1.0f);
    REQUIRE(std::memcmp(row.data(), whole.data() + r * cols, cols * sizeof(float)) == 0);
  }
}

TEST_CASE("the samples are libm's Box-Muller to within one float rounding", "[fill_normal]") {
  const std::int64_t n = 1 << 21;
  Vec x = nan_vec(n);
  cpu_ops().fill_normal(buf(x), 1, n, kKey, 0, 0, 1.0f);
  int differ = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float want = libm_normal(kKey, static_cast<std::uint64_t>(i));
    if (x[i] == want) continue;
    ++differ;
    REQUIRE(std::nextafter(want, x[i]) == x[i]);  // one float apart
  }
  CHECK(differ <= 4);  // the double results differ in their last bits; a float rounds apart ~1e-8 of the time
}

TEST_CASE("log and cos of the words, edges included, to double precision", "[fill_normal]") {
  for (const std::uint32_t w : {0u, 1u, 2u, 0x3FFFFFFFu, 0x40000000u, 0x5A827999u, 0x7FFFFFFFu, 0x80000000u,
                                0xB504F333u, 0xBFFFFFFFu, 0xC0000000u, 0xFFFFFFFEu, 0xFFFFFFFFu, 0x1FFFFFFFu,
                                0x20000000u, 0x60000000u, 0xA0000000u, 0xE0000000u, 0xDFFFFFFFu}) {
    INFO("word " << w);
    const long double u1 = (static_cast<long double>(w) + 1.0L) / 4294967296.0L;
    const long double angle = 2.0L * std::numbers::pi_v<long double> * static_cast<long double>(w) / 4294967296.0L;
    CHECK(std::abs(philox::log_unit(w) - std::log(u1)) <= 4e-16L * std::max(1.0L, std::abs(std::log(u1))));
    CHECK(std::abs(philox::cos_turn(w) - std::cos(angle)) <= 4e-16L);
  }
  CHECK(philox::log_unit(0xFFFFFFFFu) == 0.0);
  CHECK(philox::cos_turn(0) == 1.0);
  CHECK(philox::cos_turn(0x80000000u) == -1.0);
}

TEST_CASE("the samples look standard normal", "[fill_normal]") {
  const std::int64_t n = 400000;
  Vec x = nan_vec(n);
  const auto key = ptrain::runtime::packed(ptrain::runtime::stream_key(1234, ptrain::runtime::name_hash("w")));
  cpu_ops().fill_normal(buf(x), 1, n, key, 0, 0, 1.0f);
  double sum = 0, sum_sq = 0, sum_4 = 0;
  int beyond_3 = 0;
  for (const float v : x) {
    REQUIRE(std::isfinite(v));
    sum += v;
    sum_sq += static_cast<double>(v) * v;
    sum_4 += std::pow(static_cast<double>(v), 4);
    beyond_3 += std::abs(v) > 3.0f;
  }
  CHECK(std::abs(sum / n) < 0.005);
  CHECK(std::abs(sum_sq / n - 1.0) < 0.01);
  CHECK(std::abs(sum_4 / n - 3.0) < 0.05);                           // kurtosis
  CHECK(std::abs(beyond_3 / static_cast<double>(n) - 0.0027) < 0.0005);  // P(|z| > 3)
}

TEST_CASE("fill_normal takes F32 only", "[fill_normal]") {
  Vec x = nan_vec(4);
  Buf b = buf(x);
  b.dtype = DType::BF16;
  REQUIRE_THROWS_AS(cpu_ops().fill_normal(b, 1, 4, kKey, 0, 0, 1.0f), std::invalid_argument);
  REQUIRE_THROWS_AS(cpu_ops().fill_normal(buf(x), -1, 4, kKey, 0, 0, 1.0f), std::invalid_argument);
}
