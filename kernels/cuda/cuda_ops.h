// The CUDA implementation of ops.h, for the engine. Nothing here touches the CUDA runtime before it is
// called, so CPU-only programs and tests link and run on machines without a GPU.
//
// cuda_ops() is one process-wide Ops bound to the device that is current when it is first used (the
// engine calls cudaSetDevice first); using it while another device is current throws. Its state is
// created on that first use: ONE compute stream (non-blocking: it does not synchronise with the
// legacy default stream, so order other streams and copies against it with events), a cuBLASLt handle
// with a 32 MiB workspace, and a stream-ordered memory pool for small temporaries (column-reduction
// partials, sort buffers, flags). Every op is enqueued on the compute stream; only
// cross_entropy_forward_backward (to check targets) and sum_squares (to return its value)
// synchronise the host. Argument errors throw std::invalid_argument("cuda <op>: ..."), CUDA library
// errors std::runtime_error (kernels/cuda/check.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/ops.h"

namespace ptrain::kernels {

// True when the CUDA runtime sees at least one device. Never throws: false without a driver or GPU.
bool cuda_device_available();

// Makes device (local_rank mod the visible devices) current for this process: call it before
// cuda_ops() is first used. Returns the device chosen.
int cuda_select_device(int local_rank);

// The CUDA Ops (device() == Device::Cuda).
const Ops& cuda_ops();

// The stream every CUDA op runs on (creates cuda_ops()'s state if needed).
cudaStream_t cuda_compute_stream();

}  // namespace ptrain::kernels
