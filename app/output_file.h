// Writing a command's output file whole (a profile, a drawing, a report), the failure said on stderr.
#pragma once

#include <string>

namespace ptrain::app {

// Writes `text` to `path` (replacing it); false after "error: cannot write PATH: why" on stderr. Only
// a regular file is replaced (io::other_kind_at): a FIFO would wait for a reader, a device is not
// the file the user asked for.
bool write_output_file(const std::string& path, const std::string& text);

}  // namespace ptrain::app
