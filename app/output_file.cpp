#include "app/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/io/output_probe.h"

namespace ptrain::app {

const NamedInput* written_over(const std::string& out, const std::vector<NamedInput>& inputs) {
  for (const NamedInput& in : inputs)
    if (io::same_file(out, in.path)) return &in;
  return nullptr;
}

bool refuse_output_over_input(const char* flag, const std::string& out, const std::vector<NamedInput>& inputs) {
  const NamedInput* in = written_over(out, inputs);
  if (in == nullptr) return false;
  std::fprintf(stderr, "error: %s %s is %s, which this command reads: writing it would destroy it (fix: name "
               "another file)\n", flag, out.c_str(), in->what.c_str());
  return true;
}

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
