// Little-endian loads and stores at any alignment, for reading mapped files (internal to data/).
#pragma once

#include <bit>
#include <cstddef>
#include <cstring>
#include <type_traits>

namespace ptrain::data::detail {

static_assert(std::endian::native == std::endian::little,
              "the data formats are little-endian; a big-endian host would need byte swaps here");

template <typename T>
inline T load(const std::byte* at) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
inline void store(std::byte* at, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(at, &value, sizeof(T));
}

}  // namespace ptrain::data::detail
