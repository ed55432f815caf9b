// One check macro for every CUDA-side status type: PTRAIN_CUDA_CHECK(stmt) evaluates stmt once and,
// if it failed, throws std::runtime_error naming the statement, the current device, the library's
// error string and file:line (ggml's CUDA_CHECK, as an exception: library code never aborts).
// Overloads of check_status() pick the error string for cudaError_t, cublasStatus_t, and, where
// their headers are installed, cudnnStatus_t and ncclResult_t. PTRAIN_CUDA_CHECK_LAUNCH() follows
// every kernel launch (bad configurations surface there; faults inside a kernel surface at the next
// synchronising call).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define PTRAIN_CHECK_HAVE_CUDNN 1
#endif
#if __has_include(<nccl.h>)
#include <nccl.h>
#define PTRAIN_CHECK_HAVE_NCCL 1
#endif

namespace ptrain::kernels::cuda {

[[noreturn]] inline void throw_cuda_failure(const char* library, const char* error, const char* stmt,
                                            const char* file, int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  throw std::runtime_error(std::string(library) + " error '" + error + "' in `" + stmt + "` on device " +
                           std::to_string(device) + " at " + file + ":" + std::to_string(line));
}

inline void check_status(cudaError_t status, const char* stmt, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_failure("CUDA", cudaGetErrorString(status), stmt, file, line);
}

inline void check_status(cublasStatus_t status, const char* stmt, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_cuda_failure("cuBLAS", cublasLtGetStatusString(status), stmt, file, line);
  }
}

#ifdef PTRAIN_CHECK_HAVE_CUDNN
inline void check_status(cudnnStatus_t status, const char* stmt, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw_cuda_failure("cuDNN", cudnnGetErrorString(status), stmt, file, line);
}
#endif

#ifdef PTRAIN_CHECK_HAVE_NCCL
inline void check_status(ncclResult_t status, const char* stmt, const char* file, int line) {
  if (status != ncclSuccess) throw_cuda_failure("NCCL", ncclGetErrorString(status), stmt, file, line);
}
#endif

}  // namespace ptrain::kernels::cuda

#define PTRAIN_CUDA_CHECK(stmt) ::ptrain::kernels::cuda::check_status((stmt), #stmt, __FILE__, __LINE__)

// After a kernel launch: a bad launch configuration (grid, shared memory, missing image for this GPU)
// is reported here, by the statement of the launch site.
#define PTRAIN_CUDA_CHECK_LAUNCH() \
  ::ptrain::kernels::cuda::check_status(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
