// libptrain_cuda.so's entry point for NCCL (nccl_comm.h's NcclBackend).
#include "engine/comm/nccl_comm.h"

extern "C" __attribute__((visibility("default"))) const ptrain::dist::NcclBackend* ptrain_nccl_backend() {
  using namespace ptrain::dist;
  static const NcclBackend backend{&make_nccl_comm, &visible_cuda_devices, &current_cuda_device_uuid};
  return &backend;
}
