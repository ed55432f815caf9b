#include "engine/io/file_format_error.h"

#include <utility>

namespace ptrain::io {
namespace {

std::string format_message(const std::string& path, std::int64_t offset, const std::string& detail) {
  std::string message = path + ": ";
  if (offset != FileFormatError::kNoOffset) message += "byte " + std::to_string(offset) + ": ";
  return message + detail;
}

}  // namespace

FileFormatError::FileFormatError(std::string path, std::int64_t offset, const std::string& detail)
    : std::runtime_error(format_message(path, offset, detail)), path_(std::move(path)), offset_(offset) {}

}  // namespace ptrain::io
