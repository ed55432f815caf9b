// Helpers for the data tests: raw file edits, and a check that a call throws DataError naming the
// right file and byte offset.
#pragma once

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
#include "tests/temp_dir.h"

namespace ptrain::data::testing {

using ptrain::test::TempDir;

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
