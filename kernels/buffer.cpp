// Names of the element types, for error messages.
#include "kernels/buffer.h"

namespace ptrain::kernels {

const char* to_string(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "i32";
    case DType::E4M3:
      return "e4m3";
    case DType::E5M2:
      return "e5m2";
  }
  return "unknown";
}

}  // namespace ptrain::kernels
