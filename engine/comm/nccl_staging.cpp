// NcclComm's host staging (nccl_comm_impl.h): a collective on host memory runs on the device scratch
// through its pinned mirror, and is waited for.
#include "engine/comm/nccl_comm_impl.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/comm/nccl_calls.h"

namespace ptrain::dist {

using namespace nccl;  // nccl_calls.h

namespace {

constexpr std::size_t kMinStagingBytes = std::size_t{1} << 16;

}  // namespace

// Host memory: through the device scratch, and waited for, since the caller reads the result
// when the call returns. Host data depends on nothing on the compute stream, so no event.
void NcclComm::run_staged(const CommKey& key, Staging staging, void* out, const Enqueue& enqueue) {
  char* scratch = reserve(std::max(staging.in_bytes, staging.out_offset + staging.out_bytes));
  if (staging.in_bytes > 0) {
    std::memcpy(pinned_, staging.in, staging.in_bytes);
    PTRAIN_DIST_CHECK(cudaMemcpyAsync(scratch, pinned_, staging.in_bytes, cudaMemcpyHostToDevice, comm_stream_));
  }
  const std::uint64_t traced = trace_mark(comm_stream_);
  issue(key, [&](ncclComm_t comm) { enqueue(scratch, comm, comm_stream_); });
  trace_device(traced, trace_mark(comm_stream_), Trace::kCommStream);
  if (staging.out_bytes > 0)
    PTRAIN_DIST_CHECK(cudaMemcpyAsync(pinned_ + staging.out_offset, scratch + staging.out_offset, staging.out_bytes,
                                      cudaMemcpyDeviceToHost, comm_stream_));
  PTRAIN_DIST_CHECK(cudaEventRecord(staged_, comm_stream_));
  wait(key, staged_);
  if (staging.out_bytes > 0) std::memcpy(out, pinned_ + staging.out_offset, staging.out_bytes);
}

// The device scratch and its pinned host mirror, grown on demand (rarely: they carry scalars and
// small messages; the minimum covers the barrier's element). Only synchronous collectives use
// them, so nothing in flight does.
char* NcclComm::reserve(std::size_t bytes) {
  if (scratch_ != nullptr && bytes <= staging_bytes_) return scratch_;
  const std::size_t size = std::max({bytes, 2 * staging_bytes_, kMinStagingBytes});
  if (scratch_ != nullptr) PTRAIN_DIST_CHECK(cudaFreeAsync(std::exchange(scratch_, nullptr), comm_stream_));
  if (pinned_ != nullptr) PTRAIN_DIST_CHECK(cudaFreeHost(std::exchange(pinned_, nullptr)));
  staging_bytes_ = 0;
  void* device = nullptr;
  void* host = nullptr;
  PTRAIN_DIST_CHECK(cudaMallocAsync(&device, size, comm_stream_));
  scratch_ = static_cast<char*>(device);
  PTRAIN_DIST_CHECK(cudaMallocHost(&host, size));
  pinned_ = static_cast<char*>(host);
  staging_bytes_ = size;
  return scratch_;
}

// Device (or managed) memory of this process's device; host memory otherwise. Any other failure
// to tell (a sticky CUDA error) is an error: taking a device pointer for host memory would crash.
bool NcclComm::is_device(const void* ptr) const {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status == cudaErrorInvalidValue) {  // older runtimes' answer for plain host memory
    cudaGetLastError();
    return false;
  }
  PTRAIN_DIST_CHECK(status);
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) return false;
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_)
    throw DistError("a collective got memory of device " + std::to_string(attributes.device) +
                    ", this rank runs on " + std::to_string(device_));
  return true;
}

}  // namespace ptrain::dist
