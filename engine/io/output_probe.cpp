#include "engine/io/output_probe.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace ptrain::io {

std::string cannot_write(const std::string& path, MakeFolder make_folder) {
  namespace fs = std::filesystem;
  std::error_code ignored;  // a folder that cannot be made shows up as the open failing
  const fs::path parent = fs::path(path).parent_path();
  if (make_folder == MakeFolder::Yes && !parent.empty()) fs::create_directories(parent, ignored);
  const bool existed = fs::exists(fs::symlink_status(path, ignored));
  errno = 0;
  std::ofstream probe(path, std::ios::app);
  if (!probe) return errno != 0 ? std::strerror(errno) : "cannot open for writing";
  probe.close();
  if (!existed) fs::remove(path, ignored);
  return "";
}

}  // namespace ptrain::io
