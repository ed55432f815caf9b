// What the local launcher (launcher.cpp) asks of the operating system, apart from supervising:
// writing its output, the store's listening socket, the signals it reads from a signalfd, and the
// workers' output pipes (its standard descriptors: io/standard_streams.h). Internal to engine/launch.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "engine/launch/unique_fd.h"

namespace ptrain::dist {

// strerror(err) as a string.
std::string errno_text(int err);

// Writes all of `data`, waiting out a non-blocking or interrupted descriptor; gives up quietly when
// the descriptor is gone (a closed terminal: the launcher keeps supervising).
void write_all(int fd, const std::string& data);

// The launcher's own output (its stdout and stderr: the workers' lines and its messages), written
// by a thread of its own, so that a reader that stalls (a paused terminal, `| less` not read) never
// stalls the supervisor: it keeps reading the workers' pipes (or they would block in their next
// print, mid-step) and answering signals. Past kMaxQueuedBytes waiting, lines are dropped, and how
// many is said once the reader takes output again.
class OutputWriter {
 public:
  static constexpr std::size_t kMaxQueuedBytes = 16 << 20;
  OutputWriter();
  // Waits up to 5 s for the queue to be written, then leaves the rest (a reader that never reads
  // must not keep the launcher from exiting).
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;
  // Queues `text` for `fd` (1 or 2); never blocks on the descriptor.
  void write(int fd, std::string text);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive this object
};

struct Listener {
  UniqueFd fd;
  int port = 0;
};

// Binds exactly `address` (IPv4 literal or a name resolving to IPv4) at `port` (0: a free one), so
// the store is reachable at the MASTER_ADDR the workers are given and nowhere else. A name that
// does not resolve is a LaunchConfigError; a port that cannot be bound a DistError.
Listener listen_tcp(const std::string& address, int port, int backlog);

// Blocks the launcher's signals (SIGCHLD, SIGINT, SIGTERM, SIGHUP) for this thread, to be read from
// a signalfd inside the poll loop; the destructor consumes what is still pending and restores the
// caller's mask and SIGCHLD action.
class SignalChannel {
 public:
  SignalChannel();
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_.get(); }
  // The mask a worker must start with: the caller's, not the launcher's blocked set.
  const sigset_t& original_mask() const { return original_; }
  // The next pending signal, if any. Linux queues a blocked signal even when it is ignored; the
  // caller's ignoring it (nohup, a background job of a script) still means "do not stop on it".
  std::optional<int> next();

 private:
  sigset_t set_{};
  sigset_t ignored_{};  // stop signals the caller ignores
  sigset_t original_{};
  struct sigaction original_sigchld_ {};
  UniqueFd fd_;
};

// Makes room for what the launcher holds open with `workers` workers (two pipes each, for the whole
// run): RLIMIT_NOFILE's soft limit is raised to the hard one when it is lower (the workers inherit
// it). A hard limit too low is a LaunchConfigError naming the count and the limit, before any
// worker starts: past it, a launch would fail halfway, with hundreds of workers started.
void reserve_descriptors(int workers);

// "SIGTERM", or "signal 42" for one without an abbreviation.
std::string signal_name(int sig);

// Whether process `pid` is stopped (SIGSTOP, SIGTSTP) or held by a debugger (/proc/PID/stat state T
// or t); false when it cannot be told (gone, no /proc).
bool process_stopped(pid_t pid);

// A pipe whose read end (launcher side) is non-blocking; both ends close-on-exec (the worker's end
// reaches it through dup2, which clears the flag on the copy). {read end, write end}.
std::pair<UniqueFd, UniqueFd> make_pipe();

}  // namespace ptrain::dist
