// Host memory for the CPU backend's buffers: zero-filled and 256-byte aligned (the Ops contract;
// more than any vector load needs, and the same alignment the CUDA backend gives).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/cpu_kernels.h"

namespace ptrain::kernels::cpu {

void* allocate(std::size_t bytes) {
  constexpr std::size_t kAlignment = 256;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

}  // namespace ptrain::kernels::cpu
