// Writing a command's output file whole (a profile, a drawing, a report), the failure said on stderr.
#pragma once

#include <string>

namespace ptrain::app {

// Writes `text` to `path` (replacing it); false after "error: cannot write PATH" on stderr.
bool write_output_file(const std::string& path, const std::string& text);

}  // namespace ptrain::app
