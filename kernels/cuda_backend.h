// The CUDA backend as the rest of ptrain sees it: a table of entry points that libptrain_cuda.so
// (kernels/cuda/module_entry.cpp) hands out, opened the first time a job needs the device
// (kernels/backend_module.h). No CUDA header here: code that only asks "is there a device?" never
// loads CUDA's libraries.
#pragma once

#include <map>
#include <string>

#include "kernels/ops.h"

namespace ptrain::kernels {

struct CudaBackend {
  bool (*device_available)();         // a usable device is visible; never throws
  int (*select_device)(int local_rank);  // device local_rank mod the visible ones, made current
  const Ops& (*ops)();                // the CUDA implementation of the op set
  void* (*compute_stream)();          // the cudaStream_t the ops run on
  // The current device's name, and the driver's, runtime's and cuBLASLt's versions
  // ({"cuda_driver": "13.0", ...}), for a profile to say what it measured.
  std::string (*describe_device)(std::map<std::string, std::string>& versions);
  int (*device_count)();  // the devices visible, which a node's ranks take in turn; never throws
  // Device `device`'s compute capability as major * 10 + minor (90: Hopper), 0 where it cannot be
  // read; never throws. What train.precision: fp8 asks of the GPU (config/fp8_cuda.h).
  int (*compute_capability)(int device);
};

// The CUDA module's table, or nullptr when this ptrain was built without CUDA or its module does
// not load (cuda_module_status in backend_module.h says which).
const CudaBackend* cuda_backend();

}  // namespace ptrain::kernels
