// Helpers for the data tests: a temporary directory removed at scope exit, raw file edits, and a
// check that a call throws DataError naming the right file and byte offset.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "engine/data/data_error.h"

namespace ptrain::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ptrain-data-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Overwrites sizeof(T) bytes at `offset` with `value` (little-endian host).
template <typename T>
void patch(const std::string& path, std::size_t offset, T value) {
  auto bytes = read_bytes(path);
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
  write_bytes(path, bytes);
}

inline void resize_file(const std::string& path, std::size_t size) {
  std::filesystem::resize_file(path, size);
}

// Runs `fn`, requires a DataError whose path contains `path_part`, whose offset is `offset` and
// whose message contains every string of `needles`.
inline void require_data_error(const std::function<void()>& fn, const std::string& path_part,
                               std::int64_t offset, const std::vector<std::string>& needles = {}) {
  try {
    fn();
  } catch (const DataError& e) {
    const std::string message = e.what();
    INFO("message: " << message);
    CHECK(e.path().find(path_part) != std::string::npos);
    CHECK(message.find(path_part) != std::string::npos);
    CHECK(e.offset() == offset);
    if (offset != DataError::kNoOffset)
      CHECK(message.find("byte " + std::to_string(offset)) != std::string::npos);
    for (const auto& needle : needles) CHECK(message.find(needle) != std::string::npos);
    return;
  }
  FAIL("expected a DataError about " << path_part);
}

}  // namespace ptrain::data::testing
