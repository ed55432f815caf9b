// The CUDA implementation of ops.h, for the engine. Nothing here touches the CUDA runtime before it is
// called, so CPU-only programs and tests link and run on machines without a GPU.
//
// cuda_ops() is one process-wide Ops bound to the device that is current when it is first used (the
// engine calls cudaSetDevice first); using it while another device is current throws. Its state is
// created on that first use: ONE compute stream (non-blocking: it does not synchronise with the
// legacy default stream, so order other streams and copies against it with events), a cuBLASLt handle
// with a 32 MiB workspace, a stream-ordered memory pool for small temporaries (column-reduction
// partials, sort buffers) and pinned blocks for host-to-device copies. Every op and copy_to_device
// is enqueued on the compute stream without waiting for it; copy_to_host is the one call that
// waits (apart from release, outside steps), and it reports what kernels found meanwhile (a
// cross-entropy target >= V). Argument errors throw std::invalid_argument("cuda <op>: ..."), CUDA
// library errors std::runtime_error (kernels/cuda/check.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>

#include "kernels/ops.h"

namespace ptrain::kernels {

// True when the CUDA runtime sees at least one device. Never throws: false without a driver or GPU.
bool cuda_device_available();
// The devices the CUDA runtime sees (after CUDA_VISIBLE_DEVICES). Never throws: 0 without a driver or GPU.
int cuda_device_count();

// Device `device`'s compute capability, major * 10 + minor; 0 where it cannot be read. Never throws.
int cuda_compute_capability(int device);

// Makes device (local_rank mod the visible devices) current for this process: call it before
// cuda_ops() is first used. Returns the device chosen.
int cuda_select_device(int local_rank);

// The current device's name; fills `versions` (cuda_driver, cuda_runtime, cublaslt).
std::string cuda_describe_device(std::map<std::string, std::string>& versions);

// The CUDA Ops (device() == Device::Cuda).
const Ops& cuda_ops();

// The stream every CUDA op runs on (creates cuda_ops()'s state if needed).
cudaStream_t cuda_compute_stream();

// How many linear_backward calls of this process took d_bias from the d_weight GEMM's BGRADB
// epilogue (the others ran the column reduction; kernels/cuda/linear.cu): for tests and profiles.
std::uint64_t cuda_bias_grads_from_epilogue();

}  // namespace ptrain::kernels
