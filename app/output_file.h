// Writing a command's output file whole (a profile, a drawing, a report), the failure said on stderr.
#pragma once

#include <string>

namespace ptrain::app {

// Writes `text` to `path` (replacing it); false after "error: cannot write PATH" on stderr.
bool write_output_file(const std::string& path, const std::string& text);

// Whether a file may be written at `path` by replacing it (renaming a new one over it): nothing is
// there, or a regular file is. A device, a FIFO or a directory never is (as root, a rename over
// /dev/null replaces the device).
bool replaceable_path(const std::string& path);

}  // namespace ptrain::app
