// An spdlog sink that writes to a descriptor (stderr, a log file) in whole lines: each record in
// one write(2), and a record of several lines (a failed rank's last lines, a collective log) as
// that many lines, each with the prefix, so that every line says when, who and how bad, and no
// other thread's or process's line can land inside one.
#pragma once

#include <functional>
#include <mutex>
#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>
#include <string>

namespace ptrain::log {

class LineSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // A descriptor this process keeps open (2). On a terminal each record first clears the line, where
  // the progress bar of the step line (on stdout, the same terminal) may stand.
  explicit LineSink(int fd);
  // `path` opened to append (created with its directory if missing, never truncated), closed with
  // the sink; std::runtime_error naming the path and the cause if it cannot be.
  static std::shared_ptr<LineSink> append_to(const std::string& path);
  ~LineSink() override;
  // Hands each record's text to `write` in place of the descriptor (nullptr: the descriptor again).
  void route(std::function<void(std::string)> write);
  // Writes `text`, whole lines already formatted (those held before this sink opened), as a record.
  void write_lines(std::string_view text);
  LineSink(const LineSink&) = delete;
  LineSink& operator=(const LineSink&) = delete;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}  // nothing is held back: every record is written at once

 private:
  LineSink(int fd, bool owned, bool terminal) : fd_(fd), owned_(owned), terminal_(terminal) {}
  void emit(std::string_view text);
  int fd_;
  bool owned_;
  bool terminal_;
  std::function<void(std::string)> route_;
};

}  // namespace ptrain::log
