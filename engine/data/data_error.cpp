#include "engine/data/data_error.h"

#include <utility>

namespace ptrain::data {

namespace {

std::string format_message(const std::string& path, std::int64_t offset, const std::string& detail) {
  std::string message = path + ": ";
  if (offset != DataError::kNoOffset) message += "byte " + std::to_string(offset) + ": ";
  return message + detail;
}

}  // namespace

DataError::DataError(std::string path, std::int64_t offset, const std::string& detail)
    : std::runtime_error(format_message(path, offset, detail)), path_(std::move(path)), offset_(offset) {}

runtime::MappedFile map_data_file(std::string path) {
  try {
    return runtime::MappedFile(std::move(path));
  } catch (const runtime::FileError& e) {
    throw DataError(e.path(), DataError::kNoOffset, e.detail());
  }
}

}  // namespace ptrain::data
