// InputFile: a file that a user named, opened for reading. Every reader of such a path (the job
// YAML, cluster.profile, data shards, checkpoints, HF weights, report's inputs) opens it here, so
// that what is not a regular file is refused at once, naming the path: a named pipe opened the
// usual way waits for a writer, forever if none comes, and `ptrain run` holds its stop signals
// during start-up, so the wait could not even be interrupted.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ptrain::io {

// A file could not be opened or read. what() reads "<path>: <detail>"; detail() alone reads e.g.
// "cannot open for reading: No such file or directory" or "expected a regular file, found a named
// pipe (FIFO)".
class FileError : public std::runtime_error {
 public:
  // `error_number` is the errno of the failed call, or 0 where none applies (not a regular file).
  FileError(std::string path, std::string detail, int error_number);

  const std::string& path() const { return path_; }
  const std::string& detail() const { return detail_; }
  int error_number() const { return error_number_; }

 private:
  std::string path_;
  std::string detail_;
  int error_number_;
};

class InputFile {
 public:
  // Opens `path` read-only without waiting on it (O_NONBLOCK) and checks that it is a regular file
  // (a symbolic link to one is one); a FileError otherwise. The descriptor is blocking again once
  // the check passes.
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  std::int64_t size() const { return size_; }  // when opened

  // The whole file from its start; FileError if a read fails.
  std::string read_all() const;

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

// InputFile(path).read_all().
std::string read_input_file(const std::string& path);

// For a message that `path` was not found: where a relative path was looked for, as
// " (relative to the working directory /home/me: /home/me/data/val.bin)"; empty for an absolute
// path. A job's relative paths start from where the command runs, not from the job file.
std::string relative_path_note(const std::string& path);

}  // namespace ptrain::io
