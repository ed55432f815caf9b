// JSON from files we did not write ourselves (safetensors headers, manifests, HF config.json):
// parsed strictly (valid UTF-8, no duplicate keys, bounded nesting) and read through typed accessors
// whose failures are CheckpointErrors naming the file and the key. Never throws anything else.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ptrain::ckpt {


// Parses `text`, which starts at byte `base_offset` of file `path` (offsets in errors are file
// offsets). Rejects invalid UTF-8, syntax errors, duplicate keys in any object and nesting deeper
// than 64 levels with a CheckpointError.
nlohmann::json parse_json_strict(std::string_view text, const std::string& path,
                                 std::int64_t base_offset = 0);

// Typed access to a member of a JSON object; `what` names the object in messages (e.g.
// "manifest.tensors[\"model/wte.weight\"]"). A missing key or a wrong type is a CheckpointError.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& value, std::string path, std::string what);

  bool has(const std::string& key) const;
  const nlohmann::json& at(const std::string& key) const;  // present, any type
  std::string string(const std::string& key) const;
  std::int64_t integer(const std::string& key) const;  // a JSON integer that fits int64
  std::int64_t non_negative(const std::string& key) const;
  double number(const std::string& key) const;  // integer or float
  bool boolean(const std::string& key) const;
  const nlohmann::json& object(const std::string& key) const;
  const nlohmann::json& array(const std::string& key) const;
  // Every key of the object must be in `allowed`.
  void only_keys(const std::vector<std::string>& allowed) const;

  JsonReader child(const std::string& key) const;   // object member as a reader
  std::string where(const std::string& key) const;  // "what.key", for messages
  [[noreturn]] void fail(const std::string& detail) const;
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& value_;
  std::string path_, what_;
};

// A JSON integer that fits int64 (nlohmann stores non-negative literals as unsigned).
bool json_int64(const nlohmann::json& v, std::int64_t& out);

}  // namespace ptrain::ckpt
