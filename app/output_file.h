// A command's output file (a plan, a profile, a drawing, a report): refused before any work where
// it cannot or must not be written (exit 2), then written whole (io::replace_file: a temporary file
// beside it, synced and renamed), a failure said on stderr with its cause (exit 1) and the file
// that was there left as it was.
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

// "error: FLAG PATH cannot be written: why" on stderr and true where `path` cannot be written
// (io::cannot_write: no such folder, not a regular file, no permission): said before the work.
bool refuse_unwritable_output(const char* flag, const std::string& path);

// "error: PATH exists and was not written by ptrain COMMAND; not replacing it" on stderr and true
// where a file is at `path`, `force` is false and `written_by_command(path)` is false: a command
// replaces its own earlier output, never a file of the user's unasked.
bool refuse_replacing_foreign_file(const std::string& path, const char* command, bool force,
                                   bool (*written_by_command)(const std::string& path));

// Writes `text` to `path`, replacing it whole (io::replace_file); false after "error: cannot write
// PATH: why" on stderr.
bool write_output_file(const std::string& path, const std::string& text);

}  // namespace ptrain::app
