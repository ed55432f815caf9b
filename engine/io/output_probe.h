// Whether a file the run or a command will write at the end can be written, found out at the start
// (before minutes of work) without changing what is there: a trace or profile from an earlier run
// stays whole should this one fail, and no empty file is left where there was none.
#pragma once

#include <string>

namespace ptrain::io {

enum class MakeFolder { No, Yes };

enum class OutputKind { File, Folder };

// "" when nothing is at `path` or what is there is of `kind` (after symlinks); else what is there
// ("a named pipe (FIFO)", "a directory", "a regular file": io::file_kind). A stat only: it never
// blocks and never changes a thing (opening a FIFO for writing waits for a reader: an output there
// would hold the run).
std::string other_kind_at(const std::string& path, OutputKind kind);

// Whether `a` and `b` are one file: where both exist, the same device and inode (after symlinks and
// hard links); else the same path once symlinks and dots are resolved. False for an empty path.
bool same_file(const std::string& a, const std::string& b);

// Whether `path` is `dir` or lies under it (a record written into checkpoint.dir): both made absolute
// with symlinks and dots resolved as far as they exist, so that "ckpt/latest", "./ckpt/x",
// "/abs/ckpt/x" and "link-to-ckpt/x" are all in "ckpt", and "ckpt2/x" is not; `path` counts as in
// `dir` too where its own entry is (its last part a symlink to elsewhere). False for an empty one.
bool is_within(const std::string& path, const std::string& dir);

// "" when `path` opens for appending (as writing it will; with MakeFolder::Yes its folder is made
// if missing, as a run's outputs' are), else why not ("No such file or directory", "it is a named
// pipe (FIFO), not a regular file"). A file that was not there is removed again.
std::string cannot_write(const std::string& path, MakeFolder make_folder);

}  // namespace ptrain::io
