// Typed device pointers: what every op takes. kernels/ never sees engine types; the engine's
// runtime::Tensor hands out Buf views of its arenas.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptrain::kernels {

// E4M3 and E5M2: FP8 codes, one byte each (kernels/fp8.h), the operands of the FP8 GEMMs (ops.h).
enum class DType : std::uint8_t { F32, BF16, I32, E4M3, E5M2 };
enum class Device : std::uint8_t { Cpu, Cuda };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: return 2;
    case DType::E4M3:
    case DType::E5M2: return 1;
    case DType::F32:
    case DType::I32: break;
  }
  return 4;
}
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
