// convert: F32 <-> BF16 in both directions and the plain copies, on the serial and the parallel
// path: round to nearest even (ties to even), infinities and overflow, NaN, exact widening of every
// bf16 value, and the rejection of non-float buffers.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

using namespace ptrain::kernels::test;
using Catch::Matchers::Contains;
using ptrain::kernels::bf16_to_f32;
using ptrain::kernels::Buf;
using ptrain::kernels::DType;
using ptrain::kernels::f32_to_bf16;

namespace {

using Bits = std::vector<std::uint16_t>;

Buf bf16_buf(Bits& b) {
  return Buf{b.data(), DType::BF16};
}

std::uint32_t f32_bits(float x) {
  return std::bit_cast<std::uint32_t>(x);
}

}  // namespace

TEST_CASE("convert rounds f32 to bf16 to nearest even", "[convert]") {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float value;
    std::uint16_t bits;
  };
  const Case cases[] = {
      {1.0f, 0x3F80},
      {1.00390625f, 0x3F80},                        // 1 + 2^-8: a tie, to the even 1.0
      {1.01171875f, 0x3F82},                        // 1 + 3 * 2^-8: a tie, up to the even 1 + 2^-6
      {std::nextafter(1.00390625f, 2.0f), 0x3F81},  // just above the tie: up
      {-1.00390625f, 0xBF80},                       // ties to even with the sign kept
      {-0.0f, 0x8000},
      {0.0f, 0x0000},
      {inf, 0x7F80},
      {-inf, 0xFF80},
      {std::numeric_limits<float>::max(), 0x7F80},  // rounds past the largest bf16: inf
      {bf16_to_f32(0x7F7F), 0x7F7F},                // the largest bf16 stays
      {1e-40f, 0x0001},                             // subnormal, rounded like any other value
  };
  Vec values;
  for (const Case& c : cases) values.push_back(c.value);
  Bits got(values.size(), 0xDEAD);
  ops().convert(bf16_buf(got), buf(values), static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("value " << values[i]);
    CHECK(got[i] == cases[i].bits);
  }
}

TEST_CASE("convert keeps NaN a NaN in both directions", "[convert]") {
  Vec nans = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
              std::numeric_limits<float>::signaling_NaN()};
  nans.push_back(std::bit_cast<float>(std::uint32_t{0x7F800001}));  // payload only in the low bits
  Bits half(nans.size());
  ops().convert(bf16_buf(half), buf(nans), static_cast<std::int64_t>(nans.size()));
  Vec back(nans.size());
  ops().convert(buf(back), bf16_buf(half), static_cast<std::int64_t>(nans.size()));
  for (std::size_t i = 0; i < nans.size(); ++i) {
    INFO("nan " << i);
    CHECK((half[i] & 0x7F80) == 0x7F80);
    CHECK((half[i] & 0x007F) != 0);
    CHECK(std::isnan(back[i]));
    CHECK((half[i] & 0x8000) == ((f32_bits(nans[i]) >> 16) & 0x8000));  // sign kept
  }
}

TEST_CASE("convert widens every bf16 value exactly and rounds it back to itself", "[convert]") {
  Bits all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  const auto n = static_cast<std::int64_t>(all.size());  // above the parallel threshold
  Vec wide = nan_vec(all.size());
  ops().convert(buf(wide), bf16_buf(all), n);
  Bits back(all.size());
  ops().convert(bf16_buf(back), buf(wide), n);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const bool nan = (all[i] & 0x7FFF) > 0x7F80;
    if (f32_bits(wide[i]) != std::uint32_t{all[i]} << 16) ++bad;
    if (nan ? !std::isnan(bf16_to_f32(back[i])) : back[i] != all[i]) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("convert of many values matches the scalar rounding, and equal dtypes copy", "[convert]") {
  for (const std::int64_t n : {std::int64_t{13}, std::int64_t{100003}}) {
    INFO("n=" << n);
    const auto count = static_cast<std::size_t>(n);
    Vec x = random_vec(count, 7, -100.0f, 100.0f);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    Bits half(count);
    ops().convert(bf16_buf(half), buf(x), n);
    std::size_t bad = 0;
    for (std::size_t i = 1; i < count; ++i) bad += half[i] != f32_to_bf16(x[i]);
    CHECK(bad == 0);

    Vec copy = nan_vec(count);
    ops().convert(buf(copy), buf(x), n);
    CHECK(std::memcmp(copy.data(), x.data(), count * sizeof(float)) == 0);  // NaN bits too
    Bits half_copy(count);
    ops().convert(bf16_buf(half_copy), bf16_buf(half), n);
    CHECK(half_copy == half);
  }
}

TEST_CASE("convert rejects non-float buffers, missing buffers and negative sizes", "[convert][errors]") {
  Vec f(4, 1.0f);
  Bits h(4);
  IVec i(4, 1);
  REQUIRE_THROWS_WITH(ops().convert(buf(i), buf(f), 4),
                      Contains("convert") && Contains("'dst' must be f32 or bf16"));
  REQUIRE_THROWS_WITH(ops().convert(bf16_buf(h), buf(i), 4), Contains("'src' must be f32 or bf16"));
  REQUIRE_THROWS_WITH(ops().convert(none(), buf(f), 4), Contains("'dst' is null"));
  REQUIRE_THROWS_WITH(ops().convert(buf(f), bf16_buf(h), -1), Contains("negative size"));
  REQUIRE_NOTHROW(ops().convert(none(), Buf{nullptr, DType::BF16}, 0));
}
