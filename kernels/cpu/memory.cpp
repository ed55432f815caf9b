// Host memory for the CPU backend's buffers: zero-filled and 256-byte aligned (the Ops contract;
// more than any vector load needs, and the same alignment the CUDA backend gives). Large buffers are
// zeroed by every thread at once: the first touch of their pages is most of a model's allocation
// time (a 0.51B Llama's 8 GB of parameters, gradients and AdamW state: 6.2 s on this 2-core
// machine's one thread).
//
// Buffers of a huge page or more (the parameters, gradients, optimizer state, the activation arena)
// are aligned to 2 MiB and asked for transparent huge pages (madvise MADV_HUGEPAGE) before that
// first touch: in 4 KiB pages a 440M-parameter Llama's ~6 GiB took 10-16 s of page faults to
// allocate. What the kernel does with the request is the machine's setting
// (/sys/kernel/mm/transparent_hugepage/enabled, docs/build-and-test.md): `always` gives huge pages
// whatever we ask, `madvise` gives them because we ask, `never` ignores the request.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/cpu_kernels.h"

namespace ptrain::kernels::cpu {

void* allocate(std::size_t bytes) {
  const std::size_t alignment = bytes >= kHugePageBytes ? kHugePageBytes : std::size_t{256};
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // A request, not a requirement: where the kernel has no transparent huge pages it fails, and the
  // buffer is in small pages as before.
  if (alignment == kHugePageBytes) static_cast<void>(::madvise(p, rounded, MADV_HUGEPAGE));
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const auto chunks = static_cast<std::int64_t>((rounded + kChunk - 1) / kChunk);
  char* base = static_cast<char*>(p);
#pragma omp parallel for schedule(static) if (chunks > 64)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    std::memset(base + begin, 0, std::min(kChunk, rounded - begin));
  }
  return p;
}

}  // namespace ptrain::kernels::cpu
