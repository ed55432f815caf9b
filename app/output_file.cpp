#include "app/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace ptrain::app {

bool write_output_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) std::fprintf(stderr, "error: cannot write %s: %s\n", path.c_str(), errno != 0 ? std::strerror(errno) : "failed");
  return static_cast<bool>(out);
}

bool replaceable_path(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  return status.type() == std::filesystem::file_type::not_found ||
         status.type() == std::filesystem::file_type::regular;
}

}  // namespace ptrain::app
