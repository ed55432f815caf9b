// SideUploads (side_uploads.cuh).
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/side_uploads.cuh"

#include <stdexcept>
#include <string>

namespace ptrain::kernels::cuda {

SideUploads::~SideUploads() {  // errors ignored: cleanup
  for (auto& [ticket, done] : pending_) static_cast<void>(cudaEventDestroy(done));
  if (copies_ != nullptr) {
    static_cast<void>(cudaStreamSynchronize(copies_));
    static_cast<void>(cudaStreamDestroy(copies_));
  }
}

std::uint64_t SideUploads::start(cudaStream_t compute, void* dst, const void* host, std::size_t bytes,
                                 Markers* markers, Ops::MarkerSpan* span) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (copies_ == nullptr) PTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
  cudaEvent_t before = nullptr, done = nullptr;
  PTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&before, cudaEventDisableTiming));
  PTRAIN_CUDA_CHECK(cudaEventRecord(before, compute));
  PTRAIN_CUDA_CHECK(cudaStreamWaitEvent(copies_, before, 0));
  PTRAIN_CUDA_CHECK(cudaEventDestroy(before));  // released once the copy stream has passed it
  const bool timed = markers != nullptr && span != nullptr;
  if (timed) span->from = markers->record(copies_);
  PTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, copies_));
  if (timed) span->to = markers->record(copies_);
  PTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  PTRAIN_CUDA_CHECK(cudaEventRecord(done, copies_));
  pending_.emplace(next_, done);
  return next_++;
}

void SideUploads::await(cudaStream_t compute, std::uint64_t ticket) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = pending_.find(ticket);
  if (it == pending_.end())
    throw std::invalid_argument("cuda await_upload: no upload in flight with ticket " + std::to_string(ticket));
  PTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute, it->second, 0));
  PTRAIN_CUDA_CHECK(cudaEventDestroy(it->second));
  pending_.erase(it);
}

}  // namespace ptrain::kernels::cuda
