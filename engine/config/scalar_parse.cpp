#include "engine/config/scalar_parse.h"

#include <charconv>
#include <cmath>

namespace ptrain::config {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::size_t count_digits(std::string_view text, std::size_t from) {
  std::size_t n = 0;
  while (from + n < text.size() && is_digit(text[from + n])) ++n;
  return n;
}

bool is_yaml_special_float(std::string_view body) {
  for (std::string_view word : {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"}) {
    if (body == word) return true;
  }
  return false;
}

// Accepts exactly the decimal float grammar above; from_chars alone would also take "inf",
// "nan" and hex forms, and parses a prefix of "1.5abc".
bool is_decimal_float(std::string_view body) {
  std::size_t i = 0;
  std::size_t integer_digits = count_digits(body, i);
  i += integer_digits;
  std::size_t fraction_digits = 0;
  if (i < body.size() && body[i] == '.') {
    ++i;
    fraction_digits = count_digits(body, i);
    i += fraction_digits;
  }
  if (integer_digits == 0 && fraction_digits == 0) return false;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    std::size_t exponent_digits = count_digits(body, i);
    if (exponent_digits == 0) return false;
    i += exponent_digits;
  }
  return i == body.size();
}

}  // namespace

IntParse parse_integer(std::string_view text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() || count_digits(digits, 0) != digits.size()) return {};
  // from_chars takes a leading '-' but not '+'.
  std::string_view signed_digits = text.front() == '+' ? text.substr(1) : text;
  std::int64_t value = 0;
  auto [end, error] =
      std::from_chars(signed_digits.data(), signed_digits.data() + signed_digits.size(), value);
  if (error == std::errc::result_out_of_range) return {ParseStatus::OutOfRange, 0};
  if (error != std::errc{} || end != signed_digits.data() + signed_digits.size()) return {};
  return {ParseStatus::Ok, value};
}

FloatParse parse_float(std::string_view text) {
  std::string_view body = text;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) body.remove_prefix(1);
  if (is_yaml_special_float(body)) return {ParseStatus::NotFinite, 0};
  if (!is_decimal_float(body)) return {};
  std::string_view signed_body = text.front() == '+' ? text.substr(1) : text;
  double value = 0;
  auto [end, error] = std::from_chars(signed_body.data(), signed_body.data() + signed_body.size(), value);
  if (error == std::errc::result_out_of_range) return {ParseStatus::OutOfRange, 0};
  if (error != std::errc{} || end != signed_body.data() + signed_body.size()) return {};
  if (!std::isfinite(value)) return {ParseStatus::OutOfRange, 0};
  return {ParseStatus::Ok, value};
}

bool is_whole_int64(double value) {
  // 2^63 is exactly representable; anything below it in magnitude converts without UB.
  constexpr double kTwoTo63 = 9223372036854775808.0;
  return std::isfinite(value) && std::trunc(value) == value && value > -kTwoTo63 && value < kTwoTo63;
}

}  // namespace ptrain::config
