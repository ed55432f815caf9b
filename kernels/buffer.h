// Typed device pointers: what every op takes. kernels/ never sees engine types; the engine's
// runtime::Tensor hands out Buf views of its arenas.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptrain::kernels {

enum class DType : std::uint8_t { F32, BF16, I32 };
enum class Device : std::uint8_t { Cpu, Cuda };

constexpr std::size_t dtype_size(DType t) { return t == DType::BF16 ? 2 : 4; }
const char* to_string(DType t);

// A typed pointer into some device's memory. `ptr` may be null for optional arguments.
struct Buf {
  void* ptr = nullptr;
  DType dtype = DType::F32;

  explicit operator bool() const { return ptr != nullptr; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr); }
};

}  // namespace ptrain::kernels
