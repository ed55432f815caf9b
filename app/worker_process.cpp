#include "app/worker_process.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#ifdef PTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ptrain::app {

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ptrain") : path.string();
}

bool detect_worker(std::optional<dist::WorkerEnv>& env) {
  try {
    env = dist::detect_worker_env();
    return true;
  } catch (const dist::LaunchConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return false;
  }
}

dist::NcclOffer nccl_offer(const kernels::Ops& ops) {
  dist::NcclOffer offer;
#ifdef PTRAIN_HAVE_NCCL
  if (ops.device() == kernels::Device::Cuda) {
    offer.gpu = dist::current_cuda_device_uuid();
    offer.compute_stream = kernels::cuda_compute_stream();
  }
#else
  (void)ops;
#endif
  return offer;
}

}  // namespace ptrain::app
