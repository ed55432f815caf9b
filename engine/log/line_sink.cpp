#include "engine/log/line_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace ptrain::log {

LineSink::LineSink(int fd) : LineSink(fd, false, ::isatty(fd) != 0) {}

std::shared_ptr<LineSink> LineSink::append_to(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // O_APPEND: an earlier run's lines are kept, and each write lands whole at the end. O_CLOEXEC:
  // the local launcher's workers do not inherit its file.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot open the log file " + path + ": " +
                             (ec ? ec.message() : std::string(std::strerror(errno))));
  return std::shared_ptr<LineSink>(new LineSink(fd, true, false));
}

LineSink::~LineSink() {
  if (owned_) ::close(fd_);
}

void LineSink::route(std::function<void(std::string)> write) {
  const std::lock_guard<std::mutex> lock(mutex_);
  route_ = std::move(write);
}

void LineSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t text;
  if (terminal_) {
    constexpr std::string_view kClearLine = "\r\033[K";
    text.append(kClearLine.data(), kClearLine.data() + kClearLine.size());
  }
  std::string_view rest(msg.payload.data(), msg.payload.size());
  while (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);  // the line's end is the formatter's
  spdlog::details::log_msg line = msg;
  while (true) {
    const std::size_t end = rest.find('\n');
    line.payload = spdlog::string_view_t(rest.data(), std::min(end, rest.size()));
    formatter_->format(line, text);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  emit(std::string_view(text.data(), text.size()));
}

void LineSink::write_lines(std::string_view text) {
  const std::lock_guard<std::mutex> lock(mutex_);
  emit(text);
}

void LineSink::emit(std::string_view text) {
  if (route_) {
    route_(std::string(text));
    return;
  }
  // One write for the record; a short one (a signal, a full pipe) goes on where it stopped. A
  // descriptor that fails (a closed terminal, a full disk) loses the line, never the run.
  const char* at = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, at, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    at += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace ptrain::log
