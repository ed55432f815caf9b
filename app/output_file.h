// Writing a command's output file whole (a profile, a drawing, a report), the failure said on stderr.
#pragma once

#include <string>
#include <vector>

namespace ptrain::app {

// A file a command reads, and what it is to the user ("the job file", "the trace").
struct NamedInput {
  std::string what, path;
};
// The first of `inputs` that writing `out` would destroy (io::same_file), or nullptr.
const NamedInput* written_over(const std::string& out, const std::vector<NamedInput>& inputs);
// For a command's --flag output: "error: FLAG FILE is WHAT, which this command reads" on stderr and
// true where `out` is one of `inputs` (the command then exits 2 before any work).
bool refuse_output_over_input(const char* flag, const std::string& out, const std::vector<NamedInput>& inputs);

// Writes `text` to `path` (replacing it); false after "error: cannot write PATH: why" on stderr. Only
// a regular file is replaced (io::other_kind_at): a FIFO would wait for a reader, a device is not
// the file the user asked for.
bool write_output_file(const std::string& path, const std::string& text);

}  // namespace ptrain::app
