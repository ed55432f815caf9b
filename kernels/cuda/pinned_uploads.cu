// PinnedUploads (pinned_uploads.cuh).
#include <algorithm>
#include <cstring>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/pinned_uploads.cuh"

namespace ptrain::kernels::cuda {
namespace {

constexpr std::size_t kBlockGranule = std::size_t{64} << 10;  // blocks are multiples of 64 KiB

}  // namespace

PinnedUploads::~PinnedUploads() {
  for (Block& b : blocks_) {  // errors ignored: cleanup
    static_cast<void>(cudaEventSynchronize(b.done));
    static_cast<void>(cudaEventDestroy(b.done));
    static_cast<void>(cudaFreeHost(b.host));
  }
}

bool PinnedUploads::finished(const Block& b) {
  const cudaError_t state = cudaEventQuery(b.done);
  if (state == cudaSuccess) return true;
  if (state != cudaErrorNotReady) PTRAIN_CUDA_CHECK(state);
  static_cast<void>(cudaGetLastError());  // "not ready" is no error: keep it from the next launch check
  return false;
}

PinnedUploads::Block& PinnedUploads::new_block(std::size_t bytes) {
  Block b;
  b.bytes = (bytes + kBlockGranule - 1) / kBlockGranule * kBlockGranule;
  PTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
  try {
    PTRAIN_CUDA_CHECK(cudaMallocHost(&b.host, b.bytes));
  } catch (...) {
    static_cast<void>(cudaEventDestroy(b.done));
    throw;
  }
  pinned_bytes_ += b.bytes;
  blocks_.push_back(b);  // a new event counts as completed until recorded
  return blocks_.back();
}

PinnedUploads::Block& PinnedUploads::free_block(std::size_t bytes) {
  // Uploads run in order on one stream, so the least recently used block that fits is the first of
  // them to be free again: only it needs asking.
  Block* oldest = nullptr;
  for (Block& b : blocks_) {
    if (b.bytes >= bytes && (oldest == nullptr || b.used < oldest->used)) oldest = &b;
  }
  if (oldest != nullptr && finished(*oldest)) return *oldest;
  if (pinned_bytes_ + bytes <= kMaxPinnedBytes) return new_block(bytes);
  if (oldest != nullptr) {  // at the cap: wait for it
    PTRAIN_CUDA_CHECK(cudaEventSynchronize(oldest->done));
    return *oldest;
  }
  // Every block is too small for this one: drain them all and start over.
  for (Block& b : blocks_) {
    PTRAIN_CUDA_CHECK(cudaEventSynchronize(b.done));
    PTRAIN_CUDA_CHECK(cudaEventDestroy(b.done));
    PTRAIN_CUDA_CHECK(cudaFreeHost(b.host));
  }
  blocks_.clear();
  pinned_bytes_ = 0;
  return new_block(bytes);
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
  if (const cudaError_t e = cudaEventRecord(b.done, stream); e != cudaSuccess) {
    // Unrecorded, the event would call the block free under its copy: wait for the copy first.
    static_cast<void>(cudaStreamSynchronize(stream));
    check_status(e, "cudaEventRecord(b.done, stream)", __FILE__, __LINE__);
  }
  b.used = ++uploads_;
}

}  // namespace ptrain::kernels::cuda
