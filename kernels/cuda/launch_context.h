// The launch context every CUDA op entry reads (launch.cuh): plain host types, so that host-only code
// (cudnn_attention.h, the tests) can hold one without CUDA's device headers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace ptrain::kernels::cuda {

// Owned by CudaOps (cuda_ops.cu), created on first use; entries only read it.
struct LaunchContext {
  cudaStream_t stream = nullptr;  // the one compute stream (non-blocking)
  cublasLtHandle_t lt = nullptr;  // linear's GEMMs
  void* lt_workspace = nullptr;   // cuBLASLt workspace
  std::size_t lt_workspace_bytes = 0;
  cudaMemPool_t scratch_pool = nullptr;  // stream-ordered temporaries (keeps its memory)
  // The first target >= V cross entropy met since the last read back (cross_entropy.cuh), in device
  // memory, and the pinned host word it is read back into.
  unsigned long long* bad_target = nullptr;
  unsigned long long* bad_target_host = nullptr;
};

}  // namespace ptrain::kernels::cuda
