#include "engine/config/value_reader.h"

#include "engine/config/scalar_parse.h"
#include "engine/config/suggest.h"
#include "engine/config/text.h"

namespace ptrain::config {
namespace {

// yaml-cpp tags quoted scalars "!"; an explicit !!str also says "this is text, not a number".
bool is_text_tagged(const YAML::Node& node) {
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

bool is_type_max(std::int64_t max) {
  return max == kMaxInt32 || max == kMaxInt64;
}

// "must be <range>": ">= 1" or "in [0, 3]".
std::string integer_range(std::int64_t min, std::int64_t max) {
  if (is_type_max(max)) return cat(">= ", min);
  return cat("in [", min, ", ", max, "]");
}

std::string integer_range_problem(std::int64_t min, std::int64_t max, bool too_small) {
  if (!is_type_max(max)) return cat("must be in [", min, ", ", max, "]");
  if (too_small) return cat("must be >= ", min);
  return cat("is too large: must be <= ", max);
}

// A field's own fix explains its lower end or its bounded range; the type's limit needs no story.
std::string range_fix_text(std::int64_t min, std::int64_t max, bool too_small, std::string_view custom) {
  if (!too_small && is_type_max(max)) return cat("use a value <= ", max);
  if (!custom.empty()) return std::string(custom);
  return cat("use a value ", integer_range(min, max));
}

std::string number_range(const NumberRange& range) {
  if (range.high) {
    return cat("in ", range.low.inclusive ? "[" : "(", range.low.value, ", ", range.high->value,
               range.high->inclusive ? "]" : ")");
  }
  return cat(range.low.inclusive ? ">= " : "> ", range.low.value);
}

bool in_range(double value, const NumberRange& range) {
  bool above_low = range.low.inclusive ? value >= range.low.value : value > range.low.value;
  bool below_high =
      !range.high || (range.high->inclusive ? value <= range.high->value : value < range.high->value);
  return above_low && below_high;
}

std::string fix_for_shape(const YAML::Node& node, std::string_view wanted) {
  if (node.IsNull()) return cat("write ", wanted, " after the colon, or delete the key to keep the default");
  if (node.IsScalar()) return "remove the quotes";
  return cat("write ", wanted, " instead of ", describe(node));
}

bool is_yaml11_boolean(std::string_view text) {
  for (std::string_view word :
       {"yes", "no", "on", "off", "y", "n", "Yes", "No", "On", "Off", "YES", "NO", "ON", "OFF", "Y", "N"}) {
    if (text == word) return true;
  }
  return false;
}

}  // namespace

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value (null)";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      if (is_text_tagged(node)) return cat("the string \"", printable(node.Scalar()), "\"");
      return printable(node.Scalar());
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "nothing";
}

ValueReader::ValueReader(LoadContext& ctx, const YAML::Node& value, std::string key, const Source& source,
                         Location key_location, int key_offset)
    : ctx_(ctx),
      value_(value),
      key_(std::move(key)),
      bad_key_(key_),
      source_(source),
      location_(std::move(key_location)),
      key_offset_(key_offset) {}

bool ValueReader::is_word(std::string_view word) const {
  return value_.IsScalar() && value_.Scalar() == word;
}

bool ValueReader::is_number() const {
  if (!value_.IsScalar() || is_text_tagged(value_)) return false;
  return parse_integer(value_.Scalar()).status != ParseStatus::NotANumber ||
         parse_float(value_.Scalar()).status != ParseStatus::NotANumber;
}

void ValueReader::fail(std::string message, std::string fix) {
  ctx_.report_error(
      {key_, location_.line, location_.column, std::move(message), std::move(fix), location_.origin});
  ctx_.mark_bad(bad_key_);
}

std::optional<std::int64_t> ValueReader::read_integer(std::int64_t min, std::int64_t max,
                                                      std::string_view range_fix) {
  std::string expected = cat("expected an integer ", integer_range(min, max));
  if (!value_.IsScalar() || is_text_tagged(value_)) {
    fail(cat(expected, ", got ", describe(value_)), fix_for_shape(value_, "an integer"));
    return std::nullopt;
  }
  const std::string& text = value_.Scalar();
  IntParse parsed = parse_integer(text);
  if (parsed.status == ParseStatus::Ok && parsed.value >= min && parsed.value <= max) return parsed.value;
  if (parsed.status == ParseStatus::Ok || parsed.status == ParseStatus::OutOfRange) {
    bool too_small = parsed.status == ParseStatus::Ok ? parsed.value < min : text.front() == '-';
    std::string fix = range_fix_text(min, max, too_small, range_fix);
    fail(cat(integer_range_problem(min, max, too_small), ", got ", printable(text)), fix);
    return std::nullopt;
  }
  FloatParse as_float = parse_float(text);
  if (as_float.status == ParseStatus::Ok && is_whole_int64(as_float.value)) {
    fail(cat(expected, ", got ", printable(text)), cat("write ", static_cast<std::int64_t>(as_float.value),
                                                       " (integers take no decimal point or exponent)"));
  } else if (as_float.status != ParseStatus::NotANumber) {
    fail(cat(expected, ", got ", printable(text)), "use a whole number");
  } else {
    fail(cat(expected, ", got ", describe(value_)), "write a whole number such as 8");
  }
  return std::nullopt;
}

bool ValueReader::integer(int& out, std::int64_t min, std::int64_t max, std::string_view range_fix) {
  std::optional<std::int64_t> value = read_integer(min, max, range_fix);
  if (value) out = static_cast<int>(*value);
  return value.has_value();
}

bool ValueReader::integer(std::int64_t& out, std::int64_t min, std::int64_t max) {
  std::optional<std::int64_t> value = read_integer(min, max, {});
  if (value) out = *value;
  return value.has_value();
}

bool ValueReader::integer(std::uint64_t& out, std::int64_t min, std::int64_t max) {
  std::optional<std::int64_t> value = read_integer(min, max, {});
  if (value) out = static_cast<std::uint64_t>(*value);
  return value.has_value();
}

bool ValueReader::optional_integer(int& out) {
  if (value_.IsNull()) {
    out = 0;
    return true;
  }
  return integer(out, 0);
}

bool ValueReader::optional_number(double& out, NumberRange range) {
  if (value_.IsNull()) {
    out = 0;
    return true;
  }
  return number(out, range);
}

bool ValueReader::number(double& out, NumberRange range) {
  std::string expected = cat("expected a number ", number_range(range));
  if (!value_.IsScalar() || is_text_tagged(value_)) {
    fail(cat(expected, ", got ", describe(value_)), fix_for_shape(value_, "a number"));
    return false;
  }
  const std::string& text = value_.Scalar();
  FloatParse parsed = parse_float(text);
  switch (parsed.status) {
    case ParseStatus::Ok:
      if (in_range(parsed.value, range)) {
        out = parsed.value;
        return true;
      }
      fail(cat("must be ", number_range(range), ", got ", printable(text)),
           cat("use a value ", number_range(range)));
      return false;
    case ParseStatus::NotFinite:
      fail(cat("must be a finite number, got ", printable(text)), cat("use a value ", number_range(range)));
      return false;
    case ParseStatus::OutOfRange:
      fail(cat("is out of the range of a 64-bit float, got ", printable(text)),
           cat("use a value ", number_range(range)));
      return false;
    case ParseStatus::NotANumber:
      break;
  }
  fail(cat(expected, ", got ", describe(value_)), "write a number such as 0.1 or 3.0e-4");
  return false;
}

bool ValueReader::boolean(bool& out) {
  if (value_.IsScalar() && !is_text_tagged(value_)) {
    const std::string& text = value_.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") {
      out = true;
      return true;
    }
    if (text == "false" || text == "False" || text == "FALSE") {
      out = false;
      return true;
    }
    if (is_yaml11_boolean(text)) {
      fail(cat("expected true or false, got ", printable(text)),
           "write true or false (YAML 1.1 spellings such as yes/no/on/off are not booleans here)");
      return false;
    }
  }
  std::string fix = value_.IsScalar() && !is_text_tagged(value_) ? "write true or false"
                                                                 : fix_for_shape(value_, "true or false");
  fail(cat("expected true or false, got ", describe(value_)), fix);
  return false;
}

bool ValueReader::text(std::string& out, bool nullable) {
  if (value_.IsNull()) {
    if (nullable) {
      out.clear();
      return true;
    }
    fail("expected a string, got an empty value (null)", "write a value after the colon, or delete the key");
    return false;
  }
  if (!value_.IsScalar()) {
    fail(cat("expected a string, got ", describe(value_)),
         "write a single value (quote it if it contains ': ' or starts with [ { * & or !)");
    return false;
  }
  if (value_.Scalar().empty() && !nullable) {
    fail("must not be empty", "write a value, or delete the key to keep the default");
    return false;
  }
  out = value_.Scalar();
  return true;
}

std::optional<std::string> ValueReader::read_choice(const std::vector<std::string>& choices) {
  std::string expected = cat("expected one of ", join(choices, " | "));
  if (!value_.IsScalar()) {
    fail(cat(expected, ", got ", describe(value_)), cat("write one of ", join(choices, ", ")));
    return std::nullopt;
  }
  const std::string& text = value_.Scalar();
  for (const std::string& choice : choices) {
    if (text == choice) return choice;
  }
  std::optional<std::string> suggestion = closest_match(text, choices);
  fail(cat(expected, ", got ", describe(value_)), suggestion ? cat("did you mean ", quoted(*suggestion), "?")
                                                             : cat("write one of ", join(choices, ", ")));
  return std::nullopt;
}

ValueReader ValueReader::element(std::size_t index, const YAML::Node& item) const {
  // An element written after its key is located at itself; an alias points back at its anchor,
  // which could be anywhere, so it is located at the key instead.
  Location where = location_;
  YAML::Mark mark = item.Mark();
  if (source_.has_positions && !mark.is_null() && mark.pos > key_offset_) where = source_.at(mark);
  ValueReader reader(ctx_, item, cat(key_, "[", index, "]"), source_, where, key_offset_);
  reader.bad_key_ = bad_key_;
  return reader;
}

bool ValueReader::integer_list(std::vector<int>& out, std::int64_t min) {
  if (value_.IsNull()) {
    out.clear();
    return true;
  }
  if (!value_.IsSequence()) {
    fail(cat("expected a list of integers such as [8, 8, 8, 8], got ", describe(value_)),
         "write the list in brackets: [a, b, ...]");
    return false;
  }
  std::vector<int> items;
  bool all_good = true;
  std::size_t index = 0;
  for (const YAML::Node& item : value_) {
    int value = 0;
    all_good = element(index++, item).integer(value, min) && all_good;
    items.push_back(value);
  }
  if (all_good) out = std::move(items);
  return all_good;
}

bool ValueReader::number_pair(std::array<double, 2>& out, NumberRange range, std::string_view names) {
  if (!value_.IsSequence() || value_.size() != 2) {
    std::string got = value_.IsSequence() ? cat("a list of ", value_.size()) : describe(value_);
    fail(cat("expected a list of two numbers [", names, "], got ", got), "write e.g. [0.9, 0.95]");
    return false;
  }
  std::array<double, 2> values{};
  bool all_good = true;
  std::size_t index = 0;
  for (const YAML::Node& item : value_) {
    all_good = element(index, item).number(values[index], range) && all_good;
    ++index;
  }
  if (all_good) out = values;
  return all_good;
}

}  // namespace ptrain::config
