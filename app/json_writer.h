// A streaming JSON writer for reports: appends straight to a string, no intermediate tree, so the
// validate report of a 16,384-rank job (its rank lists) is written in a few milliseconds.
// Keys and values are written in call order; the caller keeps the nesting balanced.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptrain::app {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);  // inside an object, before its value

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(double x);  // non-finite numbers are written as null (JSON has no NaN)
  JsonWriter& value(std::int64_t x);
  JsonWriter& value(int x) { return value(static_cast<std::int64_t>(x)); }
  JsonWriter& value(bool b);
  JsonWriter& value(const std::vector<int>& list);                 // [1,2,3]
  JsonWriter& value(const std::vector<std::vector<int>>& lists);  // [[0,1],[2,3]]

  const std::string& str() const { return out_; }

 private:
  void separate();  // a comma between siblings
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace ptrain::app
