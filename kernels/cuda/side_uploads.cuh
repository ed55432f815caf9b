// Uploads beside the compute stream (ops.h: upload_async / await_upload), for the optimizer
// offload's weights coming back from the host while the forward computes: each copy runs on a
// copy stream of its own, after what the compute stream had been given when it started, and the
// compute stream waits for it, by an event, only where the ticket is awaited. The host memory is
// pinned (ops.h: pin_host), so the copy is a DMA the copy engine runs beside the kernels. Timed
// (`markers` and `span` given), the copy stream records a marker just before and just after the copy.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "kernels/cuda/markers.cuh"
#include "kernels/ops.h"

namespace ptrain::kernels::cuda {

class SideUploads {
 public:
  SideUploads() = default;
  SideUploads(const SideUploads&) = delete;
  SideUploads& operator=(const SideUploads&) = delete;
  ~SideUploads();

  std::uint64_t start(cudaStream_t compute, void* dst, const void* host, std::size_t bytes,
                      Markers* markers = nullptr, Ops::MarkerSpan* span = nullptr);
  void await(cudaStream_t compute, std::uint64_t ticket);

 private:
  std::mutex mutex_;
  cudaStream_t copies_ = nullptr;                // created on the first upload
  std::map<std::uint64_t, cudaEvent_t> pending_;  // recorded after each upload's copy
  std::uint64_t next_ = 1;
};

}  // namespace ptrain::kernels::cuda
