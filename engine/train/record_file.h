// A file a run appends its records to as it trains (logging.metrics' JSONL, a TensorBoard event
// file), each record whole or not at all: a write that fails (a full disk) is taken back by cutting
// the file to where the record began, so that what is left ends with a whole record, and the error
// names the file, the cause (strerror) and the record lost; where the cut fails too, it says that
// the file ends in part of a record.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ptrain::train {

// A record that did not reach its file: what() says which file, why, and what it holds now.
class RecordWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RecordFile {
 public:
  // Opens `path` for appending (made if missing, its folder too); `key` names it in errors
  // ("logging.metrics"). One that cannot be opened is std::invalid_argument: bad input, found
  // before the first step.
  RecordFile(std::string key, std::string path);
  ~RecordFile();  // closes quietly: a run that ends early reports its own failure
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Appends `record`; `what` is the record in words ("the row of step 12"). Throws RecordWriteError
  // "<key>: cannot write '<path>': <cause>: <what> was not written (...)".
  void append(std::string_view record, const std::string& what);
  // Closes the file; a close that reports an error (NFS reports a failed write back then) throws
  // RecordWriteError. Nothing is appended after it.
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string key_, path_;
  int fd_ = -1;
};

}  // namespace ptrain::train
