// libptrain_cuda.so's entry point for the kernels (kernels/cuda_backend.h); dist's NCCL entry is
// engine/dist/nccl_module_entry.cpp.
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda_backend.h"

extern "C" __attribute__((visibility("default"))) const ptrain::kernels::CudaBackend* ptrain_cuda_backend() {
  using namespace ptrain::kernels;
  static const CudaBackend backend{
      &cuda_device_available, &cuda_select_device, &cuda_ops,
      [] { return static_cast<void*>(cuda_compute_stream()); },
      &cuda_describe_device,
  };
  return &backend;
}
