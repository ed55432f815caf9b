// Whether a file the run or a command will write at the end can be written, found out at the start
// (before minutes of work) without changing what is there: a trace or profile from an earlier run
// stays whole should this one fail, and no empty file is left where there was none.
#pragma once

#include <string>

namespace ptrain::io {

enum class MakeFolder { No, Yes };

// "" when `path` opens for appending (as writing it will; with MakeFolder::Yes its folder is made
// if missing, as a run's outputs' are), else why not ("No such file or directory"). A file that
// was not there is removed again.
std::string cannot_write(const std::string& path, MakeFolder make_folder);

}  // namespace ptrain::io
