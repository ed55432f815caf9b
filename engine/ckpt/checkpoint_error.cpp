#include "engine/ckpt/checkpoint_error.h"

#include <cstring>

namespace ptrain::ckpt {

CheckpointIoError::CheckpointIoError(const std::string& path, const std::string& action, int errnum)
    : std::runtime_error(path + ": " + action + (errnum != 0 ? std::string(": ") + std::strerror(errnum) : "")) {}

}  // namespace ptrain::ckpt
