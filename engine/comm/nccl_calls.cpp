#include "engine/comm/nccl_calls.h"

#include <cstdio>
#include <cstring>

namespace ptrain::dist::nccl {

void throw_failure(const char* library, const std::string& error, const char* stmt, const char* file, int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  throw DistError(std::string(library) + " error '" + error + "' in `" + stmt + "` on device " +
                  std::to_string(device) + " at " + file + ":" + std::to_string(line));
}

std::string nccl_error(ncclResult_t status) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string(": ") + last;
  return text;
}

void check_status(cudaError_t status, const char* stmt, const char* file, int line) {
  if (status != cudaSuccess) throw_failure("CUDA", cudaGetErrorString(status), stmt, file, line);
}

void check_status(ncclResult_t status, const char* stmt, const char* file, int line) {
  if (status != ncclSuccess && status != ncclInProgress) throw_failure("NCCL", nccl_error(status), stmt, file, line);
}

ncclDataType_t nccl_type(ElemType type) {
  switch (type) {
    case ElemType::F32: return ncclFloat32;
    case ElemType::F64: return ncclFloat64;
    case ElemType::I64: return ncclInt64;
    case ElemType::BF16: return ncclBfloat16;
  }
  throw DistError("NCCL: unknown element type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  throw DistError("NCCL: unknown reduce op");
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

void read_unique_id(const std::vector<char>& value, ncclUniqueId& id) {
  if (value.size() != sizeof id.internal)
    throw DistError("an NCCL unique id in the store has " + std::to_string(value.size()) + " bytes, not " +
                    std::to_string(sizeof id.internal));
  std::memcpy(id.internal, value.data(), sizeof id.internal);
}

std::string seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

}  // namespace ptrain::dist::nccl
