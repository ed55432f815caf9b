#include "app/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/io/output_probe.h"

namespace ptrain::app {

bool write_output_file(const std::string& path, const std::string& text) {
  if (const std::string other = io::other_kind_at(path, io::OutputKind::File); !other.empty()) {
    std::fprintf(stderr, "error: cannot write %s: it is %s, not a regular file\n", path.c_str(), other.c_str());
    return false;
  }
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) std::fprintf(stderr, "error: cannot write %s: %s\n", path.c_str(), errno != 0 ? std::strerror(errno) : "failed");
  return static_cast<bool>(out);
}

}  // namespace ptrain::app
