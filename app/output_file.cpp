#include "app/output_file.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "engine/io/output_probe.h"
#include "engine/io/replace_file.h"

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

bool refuse_unwritable_output(const char* flag, const std::string& path) {
  const std::string why = io::cannot_write(path, io::MakeFolder::No);
  if (why.empty()) return false;
  std::fprintf(stderr, "error: %s %s cannot be written: %s (fix: name a writable file)\n", flag, path.c_str(), why.c_str());
  return true;
}

bool refuse_replacing_foreign_file(const std::string& path, const char* command, bool force,
                                   bool (*written_by_command)(const std::string& path)) {
  std::error_code ignored;
  if (force || !std::filesystem::exists(path, ignored) || written_by_command(path)) return false;
  std::fprintf(stderr, "error: %s exists and was not written by ptrain %s; not replacing it (fix: pass --out with "
               "another path, or --force)\n", path.c_str(), command);
  return true;
}

bool write_output_file(const std::string& path, const std::string& text) {
  const std::optional<io::WriteFailure> failure = io::replace_file(path, text);
  if (failure)
    std::fprintf(stderr, "error: cannot write %s: %s\n", path.c_str(), failure->describe().c_str());
  return !failure;
}

}  // namespace ptrain::app
