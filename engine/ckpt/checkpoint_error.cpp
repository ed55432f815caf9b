#include "engine/ckpt/checkpoint_error.h"

#include <cstring>
#include <utility>

namespace ptrain::ckpt {
namespace {

std::string format_message(const std::string& path, std::int64_t offset, const std::string& detail) {
  std::string message = path + ": ";
  if (offset != CheckpointError::kNoOffset) message += "byte " + std::to_string(offset) + ": ";
  return message + detail;
}

}  // namespace

CheckpointError::CheckpointError(std::string path, std::int64_t offset, const std::string& detail)
    : std::runtime_error(format_message(path, offset, detail)), path_(std::move(path)), offset_(offset) {}

CheckpointIoError::CheckpointIoError(const std::string& path, const std::string& action, int errnum)
    : std::runtime_error(path + ": " + action + ": " + std::strerror(errnum)) {}

}  // namespace ptrain::ckpt
