// PinnedUploads (pinned_uploads.cuh).
#include <algorithm>
#include <cstring>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/pinned_uploads.cuh"

namespace ptrain::kernels::cuda {
namespace {

constexpr std::size_t kMinBlockBytes = std::size_t{1} << 20;

}  // namespace

PinnedUploads::~PinnedUploads() {
  for (Block& b : blocks_) {  // errors ignored: cleanup
    static_cast<void>(cudaEventSynchronize(b.done));
    static_cast<void>(cudaEventDestroy(b.done));
    static_cast<void>(cudaFreeHost(b.host));
  }
}

PinnedUploads::Block& PinnedUploads::free_block(std::size_t bytes) {
  for (Block& b : blocks_) {
    if (b.bytes < bytes) continue;
    const cudaError_t state = cudaEventQuery(b.done);
    if (state == cudaSuccess) return b;
    if (state != cudaErrorNotReady) PTRAIN_CUDA_CHECK(state);
  }
  Block b;
  b.bytes = std::max(kMinBlockBytes, bytes);
  PTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
  try {
    PTRAIN_CUDA_CHECK(cudaMallocHost(&b.host, b.bytes));
  } catch (...) {
    static_cast<void>(cudaEventDestroy(b.done));
    throw;
  }
  blocks_.push_back(b);  // a new event counts as completed until recorded
  return blocks_.back();
}

void PinnedUploads::copy(cudaStream_t stream, void* dst, const void* host, std::size_t bytes) {
  if (bytes > kMaxStagedBytes) {
    PTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Block& b = free_block(bytes);
  std::memcpy(b.host, host, bytes);
  PTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, b.host, bytes, cudaMemcpyHostToDevice, stream));
  PTRAIN_CUDA_CHECK(cudaEventRecord(b.done, stream));
}

}  // namespace ptrain::kernels::cuda
