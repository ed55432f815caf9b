#include "engine/ckpt/strict_json.h"

#include <algorithm>
#include <limits>
#include <set>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/io/utf8.h"

namespace ptrain::ckpt {
namespace {

constexpr int kMaxDepth = 64;

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& path, std::int64_t base_offset) {
  if (const std::int64_t bad = io::invalid_utf8_offset(text); bad >= 0)
    throw CheckpointError(path, base_offset + bad, "JSON text is not valid UTF-8");

  // nlohmann keeps the last of duplicate keys silently; the callback sees every key as it is read.
  std::vector<std::set<std::string>> open_objects;
  int depth = 0;
  bool too_deep = false;
  std::string duplicate;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (++depth > kMaxDepth) too_deep = true;
        if (event == E::object_start) open_objects.emplace_back();
        break;
      case E::object_end:
      case E::array_end:
        --depth;
        if (event == E::object_end && !open_objects.empty()) open_objects.pop_back();
        break;
      case E::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      case E::value:
        break;
    }
    return !too_deep;
  };

  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    const std::int64_t at = static_cast<std::int64_t>(std::max<std::size_t>(e.byte, 1) - 1);
    throw CheckpointError(path, base_offset + at, std::string("invalid JSON: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path, base_offset, std::string("invalid JSON: ") + e.what());
  }
  if (too_deep) throw CheckpointError(path, base_offset, "JSON nested deeper than 64 levels");
  if (!duplicate.empty())
    throw CheckpointError(path, base_offset, "duplicate key \"" + duplicate + "\" in JSON");
  return value;
}

bool json_int64(const nlohmann::json& v, std::int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<std::int64_t>();
    return true;
  }
  return false;
}

JsonReader::JsonReader(const nlohmann::json& value, std::string path, std::string what)
    : value_(value), path_(std::move(path)), what_(std::move(what)) {
  if (!value_.is_object()) fail("expected a JSON object, found " + std::string(value_.type_name()));
}

std::string JsonReader::where(const std::string& key) const {
  return what_.empty() ? key : what_ + "." + key;
}

void JsonReader::fail(const std::string& detail) const {
  throw CheckpointError(path_, (what_.empty() ? std::string() : what_ + ": ") + detail);
}

bool JsonReader::has(const std::string& key) const {
  return value_.contains(key);
}

const nlohmann::json& JsonReader::at(const std::string& key) const {
  auto it = value_.find(key);
  if (it == value_.end()) throw CheckpointError(path_, where(key) + ": missing");
  return *it;
}

std::string JsonReader::string(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_string())
    throw CheckpointError(path_, where(key) + ": expected a string, found " + v.type_name());
  return v.get<std::string>();
}

std::int64_t JsonReader::integer(const std::string& key) const {
  const nlohmann::json& v = at(key);
  std::int64_t out = 0;
  if (!json_int64(v, out))
    throw CheckpointError(path_, where(key) + ": expected an integer, found " + v.dump());
  return out;
}

std::int64_t JsonReader::non_negative(const std::string& key) const {
  const std::int64_t v = integer(key);
  if (v < 0)
    throw CheckpointError(path_,
                          where(key) + ": expected a non-negative integer, found " + std::to_string(v));
  return v;
}

double JsonReader::number(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number()) throw CheckpointError(path_, where(key) + ": expected a number, found " + v.dump());
  return v.get<double>();
}

bool JsonReader::boolean(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean())
    throw CheckpointError(path_, where(key) + ": expected true or false, found " + v.dump());
  return v.get<bool>();
}

const nlohmann::json& JsonReader::object(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_object())
    throw CheckpointError(path_, where(key) + ": expected an object, found " + v.type_name());
  return v;
}

const nlohmann::json& JsonReader::array(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_array()) throw CheckpointError(path_, where(key) + ": expected an array, found " + v.type_name());
  return v;
}

void JsonReader::only_keys(const std::vector<std::string>& allowed) const {
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
      throw CheckpointError(path_, where(it.key()) + ": unexpected key");
  }
}

JsonReader JsonReader::child(const std::string& key) const {
  return JsonReader(object(key), path_, where(key));
}

}  // namespace ptrain::ckpt
