#include "kernels/cuda/markers.cuh"

#include <stdexcept>
#include <string>

#include "kernels/cuda/check.cuh"

namespace ptrain::kernels::cuda {

Markers::~Markers() {
  for (cudaEvent_t e : events_) static_cast<void>(cudaEventDestroy(e));  // never throws from a destructor
}

std::uint64_t Markers::record(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t id;
  if (free_.empty()) {
    cudaEvent_t e = nullptr;
    PTRAIN_CUDA_CHECK(cudaEventCreate(&e));  // with timing
    events_.push_back(e);
    id = events_.size();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  PTRAIN_CUDA_CHECK(cudaEventRecord(events_[id - 1], stream));
  return id;
}

double Markers::seconds(std::uint64_t from, std::uint64_t to) {
  cudaEvent_t a, b;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    a = event(from);
    b = event(to);
  }
  PTRAIN_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0.0f;
  PTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return static_cast<double>(ms) * 1e-3;
}

void Markers::release(std::uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  static_cast<void>(event(id));
  free_.push_back(id);
}

cudaEvent_t Markers::event(std::uint64_t id) const {
  if (id == 0 || id > events_.size()) throw std::logic_error("cuda markers: no marker " + std::to_string(id));
  return events_[id - 1];
}

}  // namespace ptrain::kernels::cuda
