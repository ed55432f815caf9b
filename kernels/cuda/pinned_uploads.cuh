// Host-to-device copies that never wait for the device (ops.h: copy_to_device returns at once and
// the host memory may be reused). cudaMemcpyAsync from pageable memory waits for the stream to
// drain, which inside a step would stall the host on every microbatch's tokens; so copies up to
// kMaxStagedBytes go through pinned blocks instead: the bytes are copied into a free block, the DMA
// reads it in stream order, and an event recorded after the copy frees the block again. Blocks are
// made on demand, sized to the request, and kept, up to kMaxPinnedBytes in all; past that an upload
// waits for the oldest block in flight (the host is then that far ahead of the device). Larger
// copies go from pageable memory directly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ptrain::kernels::cuda {

class PinnedUploads {
 public:
  static constexpr std::size_t kMaxStagedBytes = std::size_t{16} << 20;
  static constexpr std::size_t kMaxPinnedBytes = std::size_t{64} << 20;

  PinnedUploads() = default;
  PinnedUploads(const PinnedUploads&) = delete;
  PinnedUploads& operator=(const PinnedUploads&) = delete;
  ~PinnedUploads();

  void copy(cudaStream_t stream, void* dst, const void* host, std::size_t bytes);

 private:
  struct Block {
    void* host = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the last copy out of the block
    std::uint64_t used = 0;      // when it was last used (uploads counted), 0: never
  };
  Block& free_block(std::size_t bytes);  // needs mutex_
  Block& new_block(std::size_t bytes);   // needs mutex_
  static bool finished(const Block& b);

  std::mutex mutex_;
  std::vector<Block> blocks_;
  std::size_t pinned_bytes_ = 0;
  std::uint64_t uploads_ = 0;
};

}  // namespace ptrain::kernels::cuda
