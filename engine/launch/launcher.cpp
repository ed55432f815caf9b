#include "engine/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/standard_streams.h"
#include "engine/launch/dist_error.h"
#include "engine/launch/launcher_os.h"
#include "engine/launch/repeated_errors.h"
#include "engine/launch/worker_env.h"
#include "engine/log/log.h"

extern char** environ;

namespace ptrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

// Lines longer than this are emitted in pieces of this size: a worker printing without newlines
// must not make the launcher buffer without bound.
constexpr std::size_t kMaxLine = 64 * 1024;

// The variables the launcher sets for its workers; inherited copies are dropped first.
constexpr const char* kWorkerVars[] = {"PTRAIN_LAUNCHED",  "RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PTRAIN_JOB_TOKEN",
                                       "PTRAIN_STORE_FD",  "PTRAIN_RESTART_ATTEMPT"};

// "5", "0.5", "2.25": seconds for messages.
std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

// ---------------------------------------------------------------- workers

// One of a worker's two output pipes, cut into lines.
struct OutputStream {
  UniqueFd fd;
  int target = 1;  // launcher's stdout or stderr
  std::string pending;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool alive = false;
  OutputStream out;
  OutputStream err;
  std::deque<std::string> tail;
  std::string first_error;  // the message of its first error line: a hang's names the rank that hung
  std::optional<Clock::time_point> exited_ok;  // when it exited 0
};

// Everything a child needs, prepared before fork: after fork only async-signal-safe calls run.
struct SpawnPlan {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<char*> argv;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int store_fd = -1;  // passed on (FD_CLOEXEC cleared) to rank 0 only
  pid_t launcher_pid = -1;
  const sigset_t* mask = nullptr;
  std::string exec_error;  // written to the worker's stderr if exec fails
};

// The launcher's environment without any variable it is about to set for the worker.
std::vector<std::string> inherited_environment() {
  std::vector<std::string> out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string item(*entry);
    const std::string name = item.substr(0, item.find('='));
    const bool ours = std::any_of(std::begin(kWorkerVars), std::end(kWorkerVars),
                                  [&](const char* var) { return name == var; });
    if (!ours) out.push_back(item);
  }
  return out;
}

// One write from the forked child (no allocation); a lost message cannot be helped there.
void write_raw(int fd, const char* data, std::size_t size) {
  if (::write(fd, data, size) < 0) return;
}

[[noreturn]] void exec_worker(const SpawnPlan& plan) {
  // Own process group: a terminal's Ctrl-C goes to the launcher only, which decides what the
  // workers get; and a kill of the group also reaches a worker's own children.
  ::setpgid(0, 0);
  // If the launcher is killed outright, its workers must not live on as orphans holding GPUs.
  // The launcher may already have died before prctl, so check the parent afterwards.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.launcher_pid) ::_exit(1);
  ::dup2(plan.stdin_fd, 0);
  ::dup2(plan.stdout_fd, 1);
  ::dup2(plan.stderr_fd, 2);
  if (plan.store_fd >= 0) ::fcntl(plan.store_fd, F_SETFD, 0);
  // The launcher decides what reaches a worker, so the worker must be able to act on what it
  // forwards: a launcher started in the background of a script ignores SIGINT, and an ignored
  // signal would stay ignored across exec (a shell cannot even trap it then).
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(sig, &default_action, nullptr);
  ::sigprocmask(SIG_SETMASK, plan.mask, nullptr);
  ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  // Still in the forked child: strerror is not async-signal-safe by the letter, but glibc's only
  // reads a static table for the errno values exec returns.
  const char* reason = std::strerror(errno);
  write_raw(2, plan.exec_error.data(), plan.exec_error.size());
  write_raw(2, reason, std::strlen(reason));
  write_raw(2, "\n", 1);
  ::_exit(127);
}

// ---------------------------------------------------------------- the supervisor

class Supervisor {
 public:
  // `attempt`: 0 for the first start of the workers, k for the k-th restart.
  Supervisor(const LaunchOptions& options, int attempt, SignalChannel& signals, OutputWriter& output)
      : options_(options),
        attempt_(attempt),
        signals_(signals),
        output_(output),
        grace_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::max(0.0, options.grace_seconds)))) {
    char name[256] = {};
    host_ = ::gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  // On every path out, an exception while spawning or supervising included, no worker is left
  // running or unreaped.
  ~Supervisor() {
    if (!any_alive()) return;
    signal_all(SIGKILL);
    for (Worker& w : workers_) {
      if (w.alive) ::waitpid(w.pid, nullptr, 0);
    }
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void spawn_all(Listener& listener, const std::string& token);
  int run();
  // After run(): whether a stop signal came (the user's stop is never answered with a restart), and
  // the first failure as the report's first line said it (empty when none).
  bool stop_requested() const { return last_stop_.has_value() || escalated_; }
  const std::string& failure() const { return failure_; }

 private:
  void spawn_one(int rank, int store_fd, int port, const std::string& token, const UniqueFd& null_fd);
  bool launch_interrupted();
  void signal_all(int sig);
  void on_signal(int sig);
  void reap();
  void on_exit(Worker& w, int status);
  void report(const Worker& w, int status);
  void read_stream(Worker& w, OutputStream& s, bool until_drained);
  void emit(Worker& w, const OutputStream& s, const std::string& line);
  void emit_complete_lines(Worker& w, OutputStream& s);
  void flush_and_close(Worker& w, OutputStream& s);
  int poll_timeout_ms() const;
  bool any_alive() const;

  const LaunchOptions& options_;
  const int attempt_;
  // Both outlive every attempt (launch_local): a stop signal between two attempts is not lost, and
  // output is written in order across them.
  SignalChannel& signals_;
  OutputWriter& output_;
  const Clock::duration grace_;
  std::string host_;
  std::vector<Worker> workers_;
  std::string failure_;  // the first failure, as reported
  RepeatedErrors repeated_;                         // the other ranks' repeats of the first error, held back
  bool failed_ = false;                             // a worker failed: the launcher returns 1
  bool bad_input_ = false;                          // ... with exit code 2 (bad input): it returns 2
  bool escalated_ = false;                          // the launcher sent SIGKILL on a second stop signal
  std::optional<Clock::time_point> last_stop_;      // when the last stop signal was forwarded
  std::optional<Clock::time_point> kill_deadline_;  // after a failure: SIGKILL the rest then
};

void Supervisor::spawn_all(Listener& listener, const std::string& token) {
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_fd) throw DistError("cannot open /dev/null: " + errno_text(errno));
  workers_.reserve(static_cast<std::size_t>(options_.nproc));
  for (int rank = 0; rank < options_.nproc; ++rank) {
    if (launch_interrupted()) {
      log::launch().warn("started {} of {} workers; starting no more", rank, options_.nproc);
      break;
    }
    spawn_one(rank, rank == 0 ? listener.fd.get() : -1, listener.port, token, null_fd);
  }
  // Rank 0 owns the socket now; a copy here would keep the port bound after rank 0 died.
  listener.fd.reset();
}

void Supervisor::spawn_one(int rank, int store_fd, int port, const std::string& token,
                           const UniqueFd& null_fd) {
  SpawnPlan plan;
  plan.env_strings = inherited_environment();
  const auto set = [&](const char* name, const std::string& value) {
    plan.env_strings.push_back(name + ("=" + value));
  };
  set("PTRAIN_LAUNCHED", "1");
  set("RANK", std::to_string(rank));
  set("WORLD_SIZE", std::to_string(options_.nproc));
  set("LOCAL_RANK", std::to_string(rank));
  set("LOCAL_WORLD_SIZE", std::to_string(options_.nproc));
  set("MASTER_ADDR", options_.master_addr);
  set("MASTER_PORT", std::to_string(port));
  set("PTRAIN_JOB_TOKEN", token);
  set("PTRAIN_RESTART_ATTEMPT", std::to_string(attempt_));
  if (store_fd >= 0) set("PTRAIN_STORE_FD", std::to_string(store_fd));
  for (std::string& s : plan.env_strings) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  std::vector<std::string> args = options_.argv;
  for (std::string& a : args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  plan.exec_error = "ptrain launcher: cannot execute " + options_.argv[0] + ": ";

  auto [out_read, out_write] = make_pipe();
  auto [err_read, err_write] = make_pipe();
  plan.stdin_fd = null_fd.get();
  plan.stdout_fd = out_write.get();
  plan.stderr_fd = err_write.get();
  plan.store_fd = store_fd;
  plan.launcher_pid = ::getpid();
  plan.mask = &signals_.original_mask();

  const pid_t pid = ::fork();
  if (pid < 0)
    throw DistError("cannot start worker " + std::to_string(rank) + ": fork: " + errno_text(errno));
  if (pid == 0) exec_worker(plan);
  // Also from this side, so the group exists before the launcher might signal it.
  ::setpgid(pid, pid);
  Worker w;
  w.rank = rank;
  w.pid = pid;
  w.alive = true;
  w.out = OutputStream{std::move(out_read), 1, {}};
  w.err = OutputStream{std::move(err_read), 2, {}};
  workers_.push_back(std::move(w));
}

// Between two spawns: the signals that came meanwhile, handled as run() handles them. A stop, or a
// worker that failed already, ends the launch (a few thousand ranks take minutes to start, and
// none would be of use); run() then supervises the workers started as it would any.
bool Supervisor::launch_interrupted() {
  bool stop = false;
  while (const std::optional<int> sig = signals_.next()) {
    if (*sig != SIGCHLD) stop = true;
    if (*sig != SIGCHLD && workers_.empty())
      log::launch().info("{} before any worker started: nothing to save", signal_name(*sig));
    else
      on_signal(*sig);
  }
  return stop || failed_;
}

bool Supervisor::any_alive() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.alive; });
}

// Signals the process group of every live worker. Only live ones: a reaped worker's pid, and so
// its group id, may belong to an unrelated process by now (its group was killed when it exited).
void Supervisor::signal_all(int sig) {
  for (const Worker& w : workers_) {
    if (w.alive) ::kill(-w.pid, sig);
  }
}

void Supervisor::on_signal(int sig) {
  if (sig == SIGCHLD) {
    reap();
    return;
  }
  const Clock::time_point now = Clock::now();
  const bool repeated = last_stop_ && now - *last_stop_ < grace_;
  if (failed_) {
    // The job is already being taken down after a failure: the stop ends what is left at once, and
    // the job still exits as the failure says (2 for bad input), restarted no more.
    log::launch().warn("{} after a rank failed, killing the other workers", signal_name(sig));
    last_stop_ = now;
    signal_all(SIGKILL);
    return;
  }
  if (repeated) {  // the user insists
    log::launch().warn("{} again, killing all workers", signal_name(sig));
    escalated_ = true;
    signal_all(SIGKILL);
    return;
  }
  const int forward = sig == SIGHUP ? SIGTERM : sig;
  log::launch().info("{}, asking the workers to stop ({}; again within {} s to kill them)", signal_name(sig),
                     signal_name(forward), format_seconds(options_.grace_seconds));
  last_stop_ = now;
  for (const Worker& w : workers_) {
    if (w.alive) ::kill(-w.pid, forward);
  }
}

void Supervisor::reap() {
  for (Worker& w : workers_) {
    if (!w.alive) continue;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != w.pid) {
      continue;
    }
    // The worker is a zombie, so its pid (its group id) cannot have been reused yet: take its
    // leftover children down now, before reaping frees the id. They would hold its pipes open
    // and outlive the job.
    ::kill(-w.pid, SIGKILL);
    int status = 0;
    ::waitpid(w.pid, &status, 0);
    on_exit(w, status);
  }
}

void Supervisor::on_exit(Worker& w, int status) {
  w.alive = false;
  // What the worker wrote before it died is still in its pipes: take it in before reporting.
  read_stream(w, w.out, true);
  read_stream(w, w.err, true);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) w.exited_ok = Clock::now();
  if (ok || failed_) return;
  failed_ = true;
  bad_input_ = WIFEXITED(status) && WEXITSTATUS(status) == 2;
  if (escalated_) return;  // killed on the user's request: nothing to report
  report(w, status);
  // A stopped worker (SIGSTOP) cannot act on SIGTERM: it is killed at once (it was named above).
  for (const Worker& other : workers_) {
    if (other.alive) ::kill(-other.pid, process_stopped(other.pid) ? SIGKILL : SIGTERM);
  }
  kill_deadline_ = Clock::now() + grace_;
}

void Supervisor::report(const Worker& w, int status) {
  std::string text = "rank " + std::to_string(w.rank) + " (host " + host_ + ", pid " + std::to_string(w.pid) + ") ";
  if (WIFSIGNALED(status)) {
    text += "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
            signal_name(WTERMSIG(status)) + ")\n";
  } else {
    text += "exited with code " + std::to_string(WEXITSTATUS(status)) + "\n";
  }
  failure_ = text.substr(0, text.size() - 1) + (w.first_error.empty() ? "" : " (first error: " + w.first_error + ")");
  // A rank stopped by a signal (SIGSTOP, a debugger) is what the others timed out waiting for.
  for (const Worker& o : workers_)
    if (o.alive && process_stopped(o.pid))
      text += "rank " + std::to_string(o.rank) + " (pid " + std::to_string(o.pid) +
              ") is stopped (SIGSTOP, SIGTSTP or a debugger): the others' collectives waited for it\n";
  text += "last output of rank " + std::to_string(w.rank) +
          (w.first_error.empty() ? "" : " besides its error above") + ":" +
          (w.tail.empty() ? " (none)\n" : "\n");
  for (const std::string& line : w.tail) text += "  " + line + "\n";
  // A rank that left before the failure, exit 0 or not, is often its cause: the others wait for it.
  for (const Worker& o : workers_)
    if (o.exited_ok)
      text += "rank " + std::to_string(o.rank) + " had exited 0, " +
              format_seconds(std::chrono::duration<double>(Clock::now() - *o.exited_ok).count()) +
              " s before\n";
  const int others = static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& o) { return o.alive; }));
  if (others > 0) {
    text += "stopping the other " + std::to_string(others) +
            " workers (SIGTERM, SIGKILL after " + format_seconds(options_.grace_seconds) + " s)\n";
  }
  log::launch().error(text);
}

void Supervisor::emit(Worker& w, const OutputStream& s, const std::string& line) {
  const bool error = s.target == 2 && is_error_line(line);
  if (!error || repeated_.show(w.rank, line))
    output_.write(s.target, line + "\n");  // its log lines say which rank it is
  if (const std::size_t at = line.find(" error: "); w.first_error.empty() && at != std::string::npos)
    w.first_error = line.substr(at + 8);
  // An error record was shown as it came (or held back as a repeat): not again in the report.
  if (options_.tail_lines <= 0 || error) return;
  w.tail.push_back(line);
  while (w.tail.size() > static_cast<std::size_t>(options_.tail_lines)) w.tail.pop_front();
}

// Reads what the pipe holds (once, or until it would block when `until_drained`) and emits the
// complete lines; at end of file the partial last line too.
void Supervisor::read_stream(Worker& w, OutputStream& s, bool until_drained) {
  char buffer[64 * 1024];
  while (s.fd) {
    const ssize_t n = ::read(s.fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // end of file, or an error that ends this stream all the same
      flush_and_close(w, s);
      return;
    }
    s.pending.append(buffer, static_cast<std::size_t>(n));
    emit_complete_lines(w, s);
    if (!until_drained) return;
  }
}

// Emits every complete line of `s.pending` and, of a line longer than kMaxLine, every full
// kMaxLine piece, whether or not its newline has arrived yet: how the bytes were cut into reads
// must not change the output.
void Supervisor::emit_complete_lines(Worker& w, OutputStream& s) {
  std::size_t start = 0;
  while (true) {
    const std::size_t newline = s.pending.find('\n', start);
    const std::size_t end = newline == std::string::npos ? s.pending.size() : newline;
    if (end - start > kMaxLine) {
      emit(w, s, s.pending.substr(start, kMaxLine));
      start += kMaxLine;
    } else if (newline != std::string::npos) {
      emit(w, s, s.pending.substr(start, newline - start));
      start = newline + 1;
    } else {
      break;
    }
  }
  s.pending.erase(0, start);
}

void Supervisor::flush_and_close(Worker& w, OutputStream& s) {
  if (!s.pending.empty()) emit(w, s, s.pending);
  s.pending.clear();
  s.fd.reset();
}

int Supervisor::poll_timeout_ms() const {
  if (!kill_deadline_) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_deadline_ - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count() + 1, 0, 60 * 1000));
}

int Supervisor::run() {
  while (any_alive()) {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    std::vector<OutputStream*> streams;
    std::vector<Worker*> owners;
    for (Worker& w : workers_) {
      for (OutputStream* s : {&w.out, &w.err}) {
        if (!s->fd) continue;
        fds.push_back({s->fd.get(), POLLIN, 0});
        streams.push_back(s);
        owners.push_back(&w);
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready < 0 && errno != EINTR) throw DistError("launcher poll failed: " + errno_text(errno));
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*owners[i - 1], *streams[i - 1], false);
    }
    if (fds[0].revents != 0) {
      while (const std::optional<int> sig = signals_.next()) on_signal(*sig);
    }
    if (kill_deadline_ && Clock::now() >= *kill_deadline_) {
      // A rank that did not stop when asked is often the one the failure came from: stopped by a
      // signal, or stuck outside the collective the others timed out in.
      std::string stuck;
      for (const Worker& w : workers_)
        if (w.alive) stuck += (stuck.empty() ? "" : ", ") + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) + ")";
      if (!stuck.empty())
        log::launch().warn("rank(s) {} did not stop within {} s of being asked (stopped, or stuck outside the "
                           "others' collective?): killing them",
                           stuck, format_seconds(options_.grace_seconds));
      signal_all(SIGKILL);
      kill_deadline_.reset();
    }
  }
  // Every worker is reaped and its group killed: take in what the pipes still hold.
  for (Worker& w : workers_) {
    read_stream(w, w.out, true);
    read_stream(w, w.err, true);
    flush_and_close(w, w.out);
    flush_and_close(w, w.err);
  }
  if (const std::string repeats = repeated_.summary(); !repeats.empty()) log::launch().warn(repeats);
  if (bad_input_ && !escalated_) return 2;
  return failed_ || escalated_ ? 1 : 0;
}

void validate(const LaunchOptions& options) {
  if (options.nproc < 1)
    throw LaunchConfigError("--nproc must be at least 1, got " + std::to_string(options.nproc));
  if (options.argv.empty() || options.argv[0].empty()) throw LaunchConfigError("the worker command is empty");
  if (options.master_port < 0 || options.master_port > 65535) {
    throw LaunchConfigError("master port " + std::to_string(options.master_port) +
                            " is not a TCP port (0..65535)");
  }
  if (!(options.grace_seconds >= 0)) throw LaunchConfigError("the grace period must be 0 seconds or more");
  if (options.max_restarts < 0)
    throw LaunchConfigError("--max-restarts must be 0 or more, got " + std::to_string(options.max_restarts));
}

// Whether the workers of one attempt are started again: after a runtime failure (not bad input, not a
// stop the user asked for), while restarts are left.
bool restart_after(const Supervisor& attempt, int code, int restarts_done, const LaunchOptions& options) {
  return code == 1 && !attempt.stop_requested() && !attempt.failure().empty() && restarts_done < options.max_restarts;
}

}  // namespace

int launch_local(const LaunchOptions& options) {
  validate(options);
  io::ensure_stdio_open();  // what it opens is 3 or above: dup2 onto a worker's 0-2 clobbers none
  // Output whose reader has gone (`ptrain run ... | head`) is dropped (OutputWriter), not a SIGPIPE that
  // would end the launcher and with it the job; a run alone ignores it too (so does each worker).
  ::signal(SIGPIPE, SIG_IGN);
  const char* inherited_token = std::getenv("PTRAIN_JOB_TOKEN");
  const std::string token =
      inherited_token != nullptr && *inherited_token != '\0' ? inherited_token : new_job_token();
  reserve_descriptors(options.nproc);
  SignalChannel signals;
  OutputWriter output;  // after signals: its thread starts with the launcher's signals blocked
  // The launcher's own log lines join its workers' in output's queue: in order, and never blocked by
  // a stalled terminal. After output: gone before it.
  const log::TerminalRoute route([&output](std::string text) { output.write(2, std::move(text)); });
  for (int attempt = 0;; ++attempt) {
    // A new listening socket each time: rank 0 of the last attempt took the previous one with it.
    Listener listener = listen_tcp(options.master_addr, options.master_port, std::max(128, 2 * options.nproc));
    Supervisor supervisor(options, attempt, signals, output);
    supervisor.spawn_all(listener, token);
    const int code = supervisor.run();
    if (!restart_after(supervisor, code, attempt, options)) return code;
    log::launch().warn("restart {} of {} (--max-restarts): {}; every rank starts again in the same layout{}",
                       attempt + 1, options.max_restarts, supervisor.failure(),
                       options.resume_note ? options.resume_note() : std::string());
  }
}

}  // namespace ptrain::dist
