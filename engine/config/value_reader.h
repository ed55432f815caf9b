// Typed reading of one YAML value: the value node, its dotted key, and where it was written.
// Each read either stores an acceptable value and returns true, or reports a diagnostic (expected
// vs got, and a fix), marks the key bad and leaves the field at its default.
#pragma once

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/enum_values.h"
#include "engine/config/load_context.h"

namespace ptrain::config {

inline constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();
inline constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

// An interval for floats: a lower bound, and an upper one where there is one.
struct NumberRange {
  struct Bound {
    double value;
    bool inclusive;
  };
  Bound low;
  std::optional<Bound> high;

  static NumberRange positive() { return {{0, false}, std::nullopt}; }
  static NumberRange non_negative() { return {{0, true}, std::nullopt}; }
  static NumberRange unit_half_open() { return {{0, true}, Bound{1, false}}; }  // [0, 1)
};

// "a mapping", "a list", "an empty value (null)", "2.5", "the string \"2\"".
std::string describe(const YAML::Node& node);

class ValueReader {
 public:
  ValueReader(LoadContext& ctx, const YAML::Node& value, std::string key, const Source& source,
              Location key_location, int key_offset);

  // A scalar spelled exactly `word` (quoted or not), e.g. dp's "auto".
  bool is_word(std::string_view word) const;
  // An unquoted scalar written as a number (integer or float, in range or not).
  bool is_number() const;
  std::string described() const { return describe(value_); }

  bool integer(int& out, std::int64_t min, std::int64_t max = kMaxInt32, std::string_view range_fix = {});
  bool integer(std::int64_t& out, std::int64_t min, std::int64_t max = kMaxInt64);
  bool integer(std::uint64_t& out, std::int64_t min, std::int64_t max = kMaxInt64);
  // An integer >= 0 where null and 0 both mean "not given" (stored as 0).
  bool optional_integer(int& out);
  bool number(double& out, NumberRange range);
  // A number in `range` where null means "not given" (stored as 0).
  bool optional_number(double& out, NumberRange range);
  bool boolean(bool& out);
  // A scalar as text; null gives "" when `nullable`; empty text is refused unless `nullable`.
  bool text(std::string& out, bool nullable);
  // One of the enum's values (EnumValues<E>), or of `allowed`, spelled as to_string spells them.
  template <class E>
  bool choice(E& out) {
    return choice(out, std::span<const E>(EnumValues<E>::values));
  }
  template <class E>
  bool choice(E& out, std::span<const E> allowed);
  // A list of integers; null gives an empty list.
  bool integer_list(std::vector<int>& out, std::int64_t min);
  bool number_pair(std::array<double, 2>& out, NumberRange range, std::string_view names);

  void fail(std::string message, std::string fix);

 private:
  std::optional<std::int64_t> read_integer(std::int64_t min, std::int64_t max, std::string_view range_fix);
  std::optional<std::string> read_choice(const std::vector<std::string>& choices);
  ValueReader element(std::size_t index, const YAML::Node& item) const;

  LoadContext& ctx_;
  YAML::Node value_;
  std::string key_;
  std::string bad_key_;  // the list's key for an element reader, else key_
  const Source& source_;
  Location location_;
  int key_offset_;  // byte offset of the key in the file, -1 if unknown
};

template <class E>
bool ValueReader::choice(E& out, std::span<const E> allowed) {
  std::vector<std::string> names;
  for (E value : allowed) names.emplace_back(to_string(value));
  std::optional<std::string> chosen = read_choice(names);
  if (!chosen) return false;
  for (E value : allowed) {
    if (*chosen == to_string(value)) out = value;
  }
  return true;
}

}  // namespace ptrain::config
