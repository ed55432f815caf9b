#include "engine/launch/launcher_os.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/launch/dist_error.h"

namespace ptrain::dist {

std::string errno_text(int err) {
  return std::strerror(err);
}

void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return;  // the launcher's own output is gone (closed terminal); keep supervising
    }
  }
}

struct OutputWriter::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<int, std::string>> queue;
  std::size_t queued_bytes = 0;
  std::size_t dropped_lines = 0;
  bool closing = false, done = false;

  void run() {
    sigset_t all;  // the launcher reads its signals from a signalfd: none may land in this thread
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return !queue.empty() || closing; });
      if (queue.empty()) break;  // closing, and all written
      auto [fd, text] = std::move(queue.front());
      queue.pop_front();
      queued_bytes -= text.size();
      if (queue.empty() && dropped_lines > 0) {
        text += "ptrain launcher: " + std::to_string(dropped_lines) +
                " lines of output were dropped: their reader did not keep up\n";
        dropped_lines = 0;
      }
      lock.unlock();
      write_all(fd, text);  // may block on a stalled reader: only this thread waits
      lock.lock();
      changed.notify_all();
    }
    done = true;
    changed.notify_all();
  }
};

OutputWriter::OutputWriter() : state_(std::make_shared<State>()) {
  std::thread([state = state_] { state->run(); }).detach();
}

OutputWriter::~OutputWriter() {
  constexpr auto kDrain = std::chrono::seconds(5);
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->closing = true;
  state_->changed.notify_all();
  state_->changed.wait_for(lock, kDrain, [&] { return state_->done; });
}

void OutputWriter::write(int fd, std::string text) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->queued_bytes + text.size() > kMaxQueuedBytes) {
    ++state_->dropped_lines;
    return;
  }
  state_->queued_bytes += text.size();
  state_->queue.emplace_back(fd, std::move(text));
  state_->changed.notify_all();
}

Listener listen_tcp(const std::string& address, int port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    throw LaunchConfigError("master address \"" + address +
                            "\" does not resolve to an IPv4 address: " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  int last_error = 0;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_error = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_error = errno;
      continue;
    }
    sockaddr_in bound{};
    socklen_t length = sizeof(bound);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      last_error = errno;
      continue;
    }
    return Listener{std::move(fd), ntohs(bound.sin_port)};
  }
  throw DistError("cannot listen on " + address + ":" + std::to_string(port) + ": " + errno_text(last_error) +
                  (port != 0 ? " (is another job using this port? pick another, or 0 for a free one)" : ""));
}

SignalChannel::SignalChannel() {
  // With SIGCHLD ignored (or SA_NOCLDWAIT) the kernel would reap the workers itself and their
  // exit codes would be lost: use the default action while supervising.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &default_action, &original_sigchld_);
  sigemptyset(&set_);
  sigemptyset(&ignored_);
  for (const int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) {
    sigaddset(&set_, sig);
    struct sigaction current {};
    if (sig != SIGCHLD && ::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) {
      sigaddset(&ignored_, sig);
    }
  }
  if (::pthread_sigmask(SIG_BLOCK, &set_, &original_) != 0) {
    ::sigaction(SIGCHLD, &original_sigchld_, nullptr);
    throw DistError("cannot block launcher signals");
  }
  fd_ = UniqueFd(::signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd_) {
    const int err = errno;
    ::pthread_sigmask(SIG_SETMASK, &original_, nullptr);
    ::sigaction(SIGCHLD, &original_sigchld_, nullptr);
    throw DistError("cannot create a signalfd: " + errno_text(err));
  }
}

SignalChannel::~SignalChannel() {
  while (next()) {
  }
  ::pthread_sigmask(SIG_SETMASK, &original_, nullptr);
  ::sigaction(SIGCHLD, &original_sigchld_, nullptr);
}

std::optional<int> SignalChannel::next() {
  signalfd_siginfo info{};
  while (::read(fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sigismember(&ignored_, sig) != 1) return sig;
  }
  return std::nullopt;
}

namespace {

// Descriptors open in this process now (before the launcher's own).
rlim_t open_descriptors() {
  std::error_code error;
  rlim_t count = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end; it.increment(error))
    ++count;
  return error ? 64 : count;  // without /proc: a generous guess
}

}  // namespace

void reserve_descriptors(int workers) {
  // Two pipe ends per worker for its whole run; while one is spawned, its two other ends; the
  // store's socket, the signalfd and /dev/null.
  const rlim_t needed = open_descriptors() + 2 * static_cast<rlim_t>(workers) + 8;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return;
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= needed) {
    const rlimit raised{limit.rlim_max == RLIM_INFINITY ? needed : limit.rlim_max, limit.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
  }
  const auto text = [](rlim_t n) { return n == RLIM_INFINITY ? std::string("unlimited") : std::to_string(n); };
  throw LaunchConfigError(
      "the local launcher would hold " + text(needed) + " open files for " + std::to_string(workers) +
      " workers (two pipes each), but the open-file limit (RLIMIT_NOFILE) is " + text(limit.rlim_cur) +
      " and at most " + text(limit.rlim_max) +
      ": start fewer ranks on this machine (--nproc, a smaller cluster.gpus_per_node), spread them over "
      "machines (srun, mpirun), or raise the hard limit (ulimit -Hn, limits.conf)");
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

bool process_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  // "pid (comm) S ...": the command may hold spaces and parentheses, the state follows the last ')'.
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'T' || text[close + 2] == 't');
}

std::pair<UniqueFd, UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw DistError("cannot create a pipe: " + errno_text(errno));
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  return {std::move(read_end), std::move(write_end)};
}

}  // namespace ptrain::dist
