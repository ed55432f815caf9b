#include "app/run_backend.h"

#include "engine/config/fp8_cuda.h"
#include "kernels/backend_module.h"

namespace ptrain::app {

std::optional<RunBackend> resolve_backend(const config::JobSpec& spec, std::string& why_not) {
  if (spec.backend == config::Backend::Cpu) return RunBackend{};
  // auto on a machine without NVIDIA's device files: the CPU, without opening the CUDA module
  if (spec.backend == config::Backend::Auto && !kernels::cuda_device_files_exist()) return RunBackend{};
  const kernels::CudaBackend* cuda = kernels::cuda_backend();
  if (cuda != nullptr && cuda->device_available()) {
    // FP8 on this GPU: its tensor cores (the devices of a machine are taken alike) and the shapes
    // cuBLASLt's FP8 GEMMs take (validate checks those for backend: cuda; auto resolves here).
    std::optional<config::Fp8CudaRefusal> refused = config::fp8_device_refusal(spec, cuda->compute_capability(0));
    if (!refused) refused = config::fp8_shape_refusal(spec);
    if (refused) {
      why_not = refused->key + ": " + refused->reason + " (" + refused->fix + ")";
      return std::nullopt;
    }
    return RunBackend{cuda, cuda->device_count()};
  }
  if (spec.backend == config::Backend::Cuda) {
    why_not = cuda != nullptr ? "backend: cuda, but no CUDA device is visible (use backend: cpu or auto)"
                              : "backend: cuda, but " + kernels::cuda_module_status().detail;
    return std::nullopt;
  }
  return RunBackend{};
}

const kernels::Ops* select_backend(const config::JobSpec& spec, int local_rank, std::string& why_not) {
  const std::optional<RunBackend> backend = resolve_backend(spec, why_not);
  if (!backend) return nullptr;
  if (backend->cuda == nullptr) return &kernels::cpu_ops();
  backend->cuda->select_device(local_rank);
  return &backend->cuda->ops();
}

}  // namespace ptrain::app
