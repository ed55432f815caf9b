// kernels/fp8.h against the OCP FP8 specification's table (fp8_table.txt, written by
// fp8_reference.py from the definitions alone): every code's value, every code back from its value,
// and rounding between codes, ties, saturation, underflow, NaN and infinity.
#include "kernels/fp8.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using ptrain::kernels::Fp8Format;

struct FormatTable {
  std::vector<std::string> values;                         // 256 spellings: repr of a double, nan, inf
  std::vector<std::pair<std::uint32_t, int>> cases;        // float32 bits -> expected code
};

std::map<std::string, FormatTable> read_table() {
  std::ifstream in(PTRAIN_FP8_TABLE);
  REQUIRE(in.good());
  std::map<std::string, FormatTable> out;
  std::string line, section, format;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string a, b;
    words >> a >> b;
    if (a == "values" || a == "cases") {
      section = a;
      format = b;
    } else if (section == "values") {
      out[format].values.push_back(b);
    } else {
      out[format].cases.emplace_back(static_cast<std::uint32_t>(std::stoul(a, nullptr, 16)), std::stoi(b, nullptr, 16));
    }
  }
  REQUIRE(out.size() == 2);
  return out;
}

std::string code_text(int code) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", code);
  return text;
}

}  // namespace

TEST_CASE("every FP8 code decodes to the specification's value and encodes back", "[fp8]") {
  const auto table = read_table();
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const FormatTable& t = table.at(ptrain::kernels::to_string(format));
    REQUIRE(t.values.size() == 256);
    for (int code = 0; code < 256; ++code) {
      INFO(ptrain::kernels::to_string(format) << " code " << code_text(code));
      const float got = ptrain::kernels::fp8_to_f32(static_cast<std::uint8_t>(code), format);
      const std::string& want = t.values[static_cast<std::size_t>(code)];
      if (want == "nan") {
        CHECK(std::isnan(got));
        continue;
      }
      const double expected = std::stod(want);  // "inf", "-inf", "-0.0" included
      CHECK(static_cast<double>(got) == expected);
      CHECK(std::signbit(got) == std::signbit(expected));
      if (std::isinf(expected)) continue;  // E5M2's infinities saturate on the way back
      CHECK(static_cast<int>(ptrain::kernels::f32_to_fp8(got, format)) == code);
    }
  }
}

TEST_CASE("FP8 rounding: nearest, ties to even, saturation, underflow, NaN", "[fp8]") {
  const auto table = read_table();
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const FormatTable& t = table.at(ptrain::kernels::to_string(format));
    REQUIRE(t.cases.size() > 500);
    int wrong = 0;
    for (const auto& [bits, code] : t.cases) {
      const float x = std::bit_cast<float>(bits);
      const int got = ptrain::kernels::f32_to_fp8(x, format);
      if (got != code) {
        ++wrong;
        UNSCOPED_INFO(ptrain::kernels::to_string(format) << ": " << x << " gave " << code_text(got) << ", want "
                                                         << code_text(code));
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("FP8 scales are powers of two that fit the tensor's amax under the format's largest value",
          "[fp8]") {
  using ptrain::kernels::fp8_scale;
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const float max = ptrain::kernels::fp8_max(format);
    for (const float amax : {1e-30f, 3e-3f, 0.02f, 1.0f, 447.9f, 448.0f, 449.0f, 1e4f, 57344.0f, 3e38f}) {
      const float s = fp8_scale(amax, format);
      int exponent = 0;
      CHECK(std::frexp(s, &exponent) == 0.5f);  // a power of two
      CHECK(static_cast<double>(amax) * s <= max);
      if (s < std::ldexp(1.0f, 125)) CHECK(static_cast<double>(amax) * s * 2 > max);  // the largest such
    }
    CHECK(fp8_scale(max, format) == 1.0f);
    CHECK(fp8_scale(0.0f, format) == 1.0f);
    CHECK(fp8_scale(std::numeric_limits<float>::quiet_NaN(), format) == 1.0f);
    CHECK(fp8_scale(std::numeric_limits<float>::infinity(), format) == 1.0f);
  }
}

TEST_CASE("cast_to_fp8 scales, rounds once and takes the amax in the same pass", "[fp8]") {
  const std::vector<float> in = {0.5f, -3.0f, 1e-6f, 0.0f, 2.75f};
  std::vector<std::uint8_t> out(in.size());
  const float scale = ptrain::kernels::fp8_scale(3.0f, Fp8Format::E4M3);
  CHECK(scale == 128.0f);
  const float amax = ptrain::kernels::cast_to_fp8(out.data(), in.data(), 5, scale, Fp8Format::E4M3);
  CHECK(amax == 3.0f);
  for (std::size_t i = 0; i < in.size(); ++i)
    CHECK(out[i] == ptrain::kernels::f32_to_fp8(in[i] * scale, Fp8Format::E4M3));
  CHECK(ptrain::kernels::fp8_to_f32(out[1], Fp8Format::E4M3) == -384.0f);  // -3 * 128, exact
  const std::vector<float> with_nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f};
  CHECK(std::isnan(ptrain::kernels::cast_to_fp8(out.data(), with_nan.data(), 3, 1.0f, Fp8Format::E5M2)));
  CHECK(out[1] == 0x7F);
  CHECK(std::isnan(ptrain::kernels::abs_max(with_nan.data(), 3)));
  CHECK(ptrain::kernels::abs_max(in.data(), 5) == 3.0f);
}
