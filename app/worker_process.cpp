#include "app/worker_process.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "engine/log/log.h"
#include "kernels/backend_module.h"
#include "kernels/cuda_backend.h"

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
    log::launch().error(e.what());
    return false;
  }
}

dist::NcclOffer nccl_offer(const kernels::Ops& ops) {
  dist::NcclOffer offer;
  if (ops.device() != kernels::Device::Cuda) return offer;
  using Entry = const dist::NcclBackend* (*)();
  const auto entry = reinterpret_cast<Entry>(kernels::cuda_module_symbol("ptrain_nccl_backend"));
  if (entry == nullptr) return offer;  // a CUDA module built without NCCL: Gloo with host staging
  offer.nccl = entry();
  offer.gpu = offer.nccl->current_device_uuid();
  // NCCL tells GPUs apart by host and bus id, and NCCL_HOSTID replaces the host's identity: ranks
  // given different NCCL_HOSTIDs are different hosts to NCCL, even on one GPU (its ranks then talk
  // over the network transport). The offer follows NCCL's rule, so such ranks agree on NCCL.
  if (const char* host_id = std::getenv("NCCL_HOSTID"); host_id != nullptr && *host_id != '\0' && !offer.gpu.empty())
    offer.gpu = std::string(host_id) + "/" + offer.gpu;
  offer.compute_stream = kernels::cuda_backend()->compute_stream();
  return offer;
}

}  // namespace ptrain::app
