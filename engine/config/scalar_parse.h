// Strict text -> number conversions for YAML plain scalars: only what YAML 1.2's core schema
// calls an integer or a float (decimal only), no locale, no partial matches, no silent overflow.
#pragma once

#include <cstdint>
#include <string_view>

namespace ptrain::config {

enum class ParseStatus {
  Ok,
  NotANumber,  // not written as a number at all
  OutOfRange,  // a number, but it does not fit the type
  NotFinite,   // .inf / .nan
};

struct IntParse {
  ParseStatus status = ParseStatus::NotANumber;
  std::int64_t value = 0;
};

struct FloatParse {
  ParseStatus status = ParseStatus::NotANumber;
  double value = 0;
};

// [-+]?[0-9]+
IntParse parse_integer(std::string_view text);

// [-+]?(.[0-9]+|[0-9]+(.[0-9]*)?)([eE][-+]?[0-9]+)?, plus [-+]?.inf and .nan (reported NotFinite).
FloatParse parse_float(std::string_view text);

// Whether `value` is a whole number that an int64 holds (2.0 yes, 2.5 no, 1e300 no).
bool is_whole_int64(double value);

}  // namespace ptrain::config
