// What the NCCL backend's files share (nccl_comm_impl.h): checked CUDA and NCCL calls, thrown as
// DistError, which the Comm base class turns into a CollectiveError naming the collective; NCCL's
// names for ptrain's element types and reductions; the non-blocking communicator configuration;
// the backoff between polls.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/comm.h"

namespace ptrain::dist::nccl {

// Formatted as kernels/cuda/check.cuh's PTRAIN_CUDA_CHECK (statement, device, file:line).
// ncclInProgress is not a failure: a non-blocking communicator carries on in the background, and
// NcclComm::settle waits for it.
[[noreturn]] void throw_failure(const char* library, const std::string& error, const char* stmt, const char* file,
                                int line);
void check_status(cudaError_t status, const char* stmt, const char* file, int line);
void check_status(ncclResult_t status, const char* stmt, const char* file, int line);
#define PTRAIN_DIST_CHECK(stmt) ::ptrain::dist::nccl::check_status((stmt), #stmt, __FILE__, __LINE__)

// NCCL's error string with its last error's detail.
std::string nccl_error(ncclResult_t status);

ncclDataType_t nccl_type(ElemType type);
ncclRedOp_t nccl_op(ReduceOp op);

// Non-blocking, so that creating, splitting and finalizing can be polled against the timeout.
ncclConfig_t nonblocking_config();

// A unique id read back from the store (its publisher wrote id.internal).
void read_unique_id(const std::vector<char>& value, ncclUniqueId& id);

// "12.5 s"
std::string seconds(std::chrono::milliseconds t);

// Pauses between polls: short at first (issuing a collective takes NCCL's background thread
// microseconds), then longer, up to a millisecond (creating a communicator takes seconds).
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(2 * delay_, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::microseconds delay_{1};
};

}  // namespace ptrain::dist::nccl
