// Device backends are modules: shared libraries next to the ptrain binary, opened (dlopen) the
// first time something asks for one, so that validate, plan, schedule, convert and CPU runs never
// load a device's libraries (CUDA's cuBLASLt, cudart and NCCL cost every start 0.1 s and 220 MB
// when linked in). libptrain_cuda.so holds the CUDA kernels and, with NCCL, dist's NCCL Comm; it
// resolves the rest of ptrain against the binary, which exports its symbols for it.
#pragma once

#include <string>

namespace ptrain::kernels {

struct ModuleStatus {
  bool built = false;   // this ptrain was built with the module
  bool loaded = false;  // it opened
  std::string detail;   // its path, or why it is not there or did not open
};

// The CUDA module's entry point `name` (dlsym), opening the module on first use (thread-safe);
// nullptr when the module is not built, does not open, or lacks `name`.
void* cuda_module_symbol(const char* name);
ModuleStatus cuda_module_status();  // opens the module if it was not yet

// Whether NVIDIA's device files exist (/dev/nvidiactl): without them no CUDA device can be visible,
// which `backend: auto` checks before it opens the module. Loads nothing.
bool cuda_device_files_exist();

}  // namespace ptrain::kernels
