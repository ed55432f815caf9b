// What kind of file a mode says, in words, for the errors that refuse what is not a regular file
// (io::InputFile) or not the file or folder an output needs (io::other_kind_at).
#pragma once

#include <sys/types.h>

namespace ptrain::io {

// "a regular file", "a directory", "a named pipe (FIFO)", "a character device", "a block device",
// "a socket", else "another kind of file".
const char* file_kind(mode_t mode);

}  // namespace ptrain::io
