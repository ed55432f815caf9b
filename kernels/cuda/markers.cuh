// The compute stream's markers (ops.h: record_marker / marker_seconds / release_marker): CUDA
// events, kept in a pool and reused once released, so a long traced run creates only as many as
// one step has in flight.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace ptrain::kernels::cuda {

class Markers {
 public:
  Markers() = default;
  Markers(const Markers&) = delete;
  Markers& operator=(const Markers&) = delete;
  ~Markers();

  std::uint64_t record(cudaStream_t stream);          // id = index + 1
  double seconds(std::uint64_t from, std::uint64_t to);  // waits for `to`
  void release(std::uint64_t id);

 private:
  cudaEvent_t event(std::uint64_t id) const;

  std::mutex mutex_;
  std::vector<cudaEvent_t> events_;
  std::vector<std::uint64_t> free_;  // released ids
};

}  // namespace ptrain::kernels::cuda
