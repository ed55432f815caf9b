#include "engine/ckpt/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/file_io.h"

namespace ptrain::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFix = " (fix: point checkpoint.dir at a directory this job can create and write)";

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Who a lock file names: "host=<name> pid=<n> started=<UTC time>\n", or nothing.
struct Holder {
  std::string host, pid, started;

  bool empty() const { return host.empty() && pid.empty(); }
  std::string describe() const {
    if (empty()) return "a process that has not written its name yet";
    return "host " + host + ", pid " + pid + (started.empty() ? "" : " (since " + started + ")");
  }
  bool alive_here() const {  // a live process of this host
    char* end = nullptr;
    const long n = std::strtol(pid.c_str(), &end, 10);
    if (host != this_host() || end == pid.c_str() || *end != '\0' || n <= 0) return false;
    return ::kill(static_cast<pid_t>(n), 0) == 0 || errno == EPERM;
  }
};

std::string field(const std::string& text, const std::string& key) {
  const auto at = text.find(key + "=");
  if (at == std::string::npos) return "";
  const auto begin = at + key.size() + 1;
  return text.substr(begin, text.find_first_of(" \n", begin) - begin);
}

Holder read_holder(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  const std::string text(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  return {field(text, "host"), field(text, "pid"), field(text, "started")};
}

bool flock_unsupported(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL;
}

// Every save replaces `latest` by a rename, which fails on a directory: refused now, not at the first
// save after the training it was to keep. A named pipe or any other non-file is no `latest` either;
// a dangling link is simply replaced.
void check_latest(const std::string& dir) {
  const std::string path = join_path(dir, kLatestName);
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec), target = fs::status(path, ec);
  if (!fs::exists(link) || !fs::exists(target) || fs::is_regular_file(target)) return;
  throw CheckpointError(path, std::string("is ") + (fs::is_directory(target) ? "a directory" : "not a regular file") +
                                  ", but every save replaces it with a file naming the newest step: the first "
                                  "save would fail (fix: move it out of checkpoint.dir; it holds `step_<N>`)");
}

// A save of step N renames its temporary directory to step_<N>, which fails on a file there: refused
// now, not after the training up to step N.
void check_step_names(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!parse_step_dir_name(e.path().filename().string()) || e.is_directory(ec)) continue;
    throw CheckpointError(e.path().string(), "is not a directory, but a save of its step renames one to this name: "
                                             "that save would fail (fix: move it out of checkpoint.dir)");
  }
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) : lock_path_(join_path(dir, kFileName)) {
  prepare_output_directory(dir, "checkpoint.dir", kFix);
  check_latest(dir);
  check_step_names(dir);

  // O_NOFOLLOW: the lock is written (emptied, then filled in), so a link there would have this job
  // truncate whatever file it names.
  fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0 && errno == ELOOP)
    throw CheckpointError(lock_path_, "is a symbolic link; the lock file is written, which would truncate what it "
                                      "names (fix: remove the link)");
  if (fd_ < 0)
    throw CheckpointError(dir, "checkpoint.dir is not writable: cannot create " + lock_path_ + ": " +
                                   std::strerror(errno) + kFix);
  try {
    const std::string refused = "checkpoint.dir is in use by another job: ";
    const std::string why = "; two jobs saving into one directory overwrite each other's checkpoints (fix: stop "
                            "that job first, or give this one its own checkpoint.dir)";
    bool locked = ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
    const int err = errno;
    const Holder previous = read_holder(fd_);
    if (!locked && !flock_unsupported(err)) {
      if (err == EWOULDBLOCK) throw CheckpointError(lock_path_, refused + previous.describe() + " holds this lock" + why);
      throw CheckpointError(lock_path_, std::string("cannot lock checkpoint.dir: ") + std::strerror(err) + kFix);
    }
    if (!locked) {  // no flock here: the contents are the lock
      warnings_.push_back(lock_path_ + ": this filesystem does not support flock (" + std::strerror(err) +
                          "): the lock file's contents stand in for a lock, which cannot tell whether a "
                          "process of another host is still alive");
      if (previous.alive_here()) throw CheckpointError(lock_path_, refused + previous.describe() + " holds it" + why);
      if (!previous.empty() && previous.host != this_host())
        throw CheckpointError(lock_path_, refused + previous.describe() + " holds it" + why +
                                              "; if that job is gone, remove this file and start again");
    }
    if (!previous.empty())
      warnings_.push_back(lock_path_ + ": stale lock of " + previous.describe() +
                          ", which ended without releasing it: taken over");
    const std::string me = "host=" + this_host() + " pid=" + std::to_string(::getpid()) + " started=" + utc_now() + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
      throw CheckpointError(dir, "checkpoint.dir is not writable: cannot write " + lock_path_ + ": " +
                                     std::strerror(errno) + kFix);
  } catch (...) {
    ::close(fd_);
    throw;
  }
  remove_leftovers(dir);
}

CheckpointDirLock::~CheckpointDirLock() {
  if (::ftruncate(fd_, 0) != 0) {
    // Left filled in: the next job takes it for a stale lock and says so; nothing is lost.
  }
  ::close(fd_);
}

}  // namespace ptrain::ckpt
