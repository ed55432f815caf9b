#include "app/flag_checks.h"

#include <charconv>
#include <string>
#include <system_error>

namespace ptrain::app {

const CLI::Validator& non_empty() {
  static const CLI::Validator check(
      [](const std::string& value) { return value.empty() ? std::string("must not be empty") : std::string(); },
      "NON-EMPTY");
  return check;
}

CLI::Validator whole_number_in(std::int64_t lo, std::int64_t hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](const std::string& value) -> std::string {
        std::int64_t n = 0;
        const char* end = value.data() + value.size();
        const auto [stop, error] = std::from_chars(value.data(), end, n);
        if (value.empty() || stop != end || error == std::errc::invalid_argument)
          return "'" + value + "' is not a whole number (expected " + range + ")";
        if (error == std::errc::result_out_of_range || n < lo || n > hi)
          return value + " is out of range (expected " + range + ")";
        return "";
      },
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

}  // namespace ptrain::app
