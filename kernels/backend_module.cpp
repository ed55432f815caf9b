#include "kernels/backend_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <system_error>

#include "kernels/cuda_backend.h"

namespace ptrain::kernels {
namespace {

struct Module {
  ModuleStatus status;
  void* handle = nullptr;
};

// The module file beside the binary (/proc/self/exe), as the build lays them out.
Module open_cuda_module() {
  Module m;
#ifdef PTRAIN_CUDA_MODULE
  m.status.built = true;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path path = (ec ? std::filesystem::path(".") : self.parent_path()) / PTRAIN_CUDA_MODULE;
  m.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m.handle == nullptr) {
    const char* why = ::dlerror();
    m.status.detail = std::string("cannot open ") + path.string() + ": " + (why != nullptr ? why : "unknown error");
  } else {
    m.status.loaded = true;
    m.status.detail = path.string();
  }
#else
  m.status.detail = "this ptrain was built without CUDA (configure with -DPTRAIN_CUDA=ON)";
#endif
  return m;
}

const Module& cuda_module() {
  static std::once_flag once;
  static Module module;
  std::call_once(once, [] { module = open_cuda_module(); });
  return module;
}

}  // namespace

void* cuda_module_symbol(const char* name) {
  const Module& m = cuda_module();
  return m.handle != nullptr ? ::dlsym(m.handle, name) : nullptr;
}

ModuleStatus cuda_module_status() { return cuda_module().status; }

bool cuda_device_files_exist() {
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidiactl", ec);
}

const CudaBackend* cuda_backend() {
  using Entry = const CudaBackend* (*)();
  const auto entry = reinterpret_cast<Entry>(cuda_module_symbol("ptrain_cuda_backend"));
  return entry != nullptr ? entry() : nullptr;
}

}  // namespace ptrain::kernels
