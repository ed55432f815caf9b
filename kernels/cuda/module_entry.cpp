// libptrain_cuda.so's entry point for the kernels (kernels/cuda_backend.h); NCCL's entry is
// engine/comm/nccl_module_entry.cpp.
#include <cstddef>
#include <stdexcept>

#include "kernels/cuda/cuda_ops.h"
#ifdef PTRAIN_HAVE_CUDNN
#include "kernels/cuda/cudnn_graph.h"
#endif
#include "kernels/cuda_backend.h"

extern "C" __attribute__((visibility("default"))) const ptrain::kernels::CudaBackend* ptrain_cuda_backend() {
  using namespace ptrain::kernels;
  static const CudaBackend backend{
      &cuda_device_available, &cuda_select_device, &cuda_ops,
      [] { return static_cast<void*>(cuda_compute_stream()); },
      &cuda_describe_device,
      &cuda_device_count,
      &cuda_compute_capability,
  };
  return &backend;
}

// cuDNN's version (major * 10000 + minor * 100 + patch) where libcudnn.so.9 opens
// (kernels/cuda/cudnn_graph.h), else 0: BF16 attention then runs on ptrain's own kernels. For --version.
extern "C" __attribute__((visibility("default"))) std::size_t ptrain_cudnn_version() {
#ifdef PTRAIN_HAVE_CUDNN
  try {
    return ptrain::kernels::cuda::cudnn::api().GetVersion();
  } catch (const std::runtime_error&) {
    return 0;
  }
#else
  return 0;
#endif
}
