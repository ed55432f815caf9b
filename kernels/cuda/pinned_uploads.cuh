// Host-to-device copies that never wait for the device (ops.h: copy_to_device returns at once and
// the host memory may be reused). cudaMemcpyAsync from pageable memory waits for the stream to
// drain, which inside a step would stall the host on every microbatch's tokens; so small copies go
// through pinned blocks instead: the bytes are copied into a free block, the DMA reads it in stream
// order, and an event recorded after the copy frees the block again. Blocks are made on demand and
// kept (after the first steps a step allocates nothing). Copies above kMaxStagedBytes (weights at
// setup, restore or import, never inside a step) go from pageable memory directly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace ptrain::kernels::cuda {

class PinnedUploads {
 public:
  static constexpr std::size_t kMaxStagedBytes = std::size_t{16} << 20;

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
  };
  Block& free_block(std::size_t bytes);  // needs mutex_

  std::mutex mutex_;
  std::vector<Block> blocks_;
};

}  // namespace ptrain::kernels::cuda
