#include "engine/data/data_error.h"

#include <utility>

namespace ptrain::data {

runtime::MappedFile map_data_file(std::string path) {
  try {
    return runtime::MappedFile(std::move(path));
  } catch (const runtime::FileError& e) {
    throw DataError(e.path(), DataError::kNoOffset, e.detail());
  }
}

}  // namespace ptrain::data
