#include "app/output_file.h"

#include <cstdio>
#include <fstream>

namespace ptrain::app {

bool write_output_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

}  // namespace ptrain::app
