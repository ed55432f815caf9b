#include "app/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/io/utf8.h"

namespace ptrain::app {

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  value(name);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  separate();
  out_ += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {  // JSON is UTF-8: a byte outside a sequence is U+FFFD
      const std::size_t len = io::utf8_sequence_length(s, i);
      if (len == 0) {
        out_ += "\\ufffd";
      } else {
        out_.append(s.substr(i, len));
        i += len - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\r': out_ += "\\r"; break;
      case '\t': out_ += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out_ += buf;
        } else {
          out_ += c;
        }
    }
  }
  out_ += '"';
  return *this;
}

JsonWriter& JsonWriter::value(double x) {
  separate();
  if (!std::isfinite(x)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);  // shortest round-trip form
  out_.append(buf, r.ptr);
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t x) {
  separate();
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  out_.append(buf, r.ptr);
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  separate();
  out_ += b ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::value(const std::vector<int>& list) {
  begin_array();
  for (int x : list) value(x);
  return end_array();
}

JsonWriter& JsonWriter::value(const std::vector<std::vector<int>>& lists) {
  begin_array();
  for (const auto& list : lists) value(list);
  return end_array();
}

}  // namespace ptrain::app
