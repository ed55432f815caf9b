// The local launcher with /bin/sh scripts as workers. Each launch runs in a forked child of the
// test (its stdout/stderr captured in files, its signal mask changes kept out of the test process),
// so the tests can also signal or kill the launcher itself.
#include "engine/launch/launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/launch/dist_error.h"

using namespace ptrain::dist;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A scratch directory for one test's pid and marker files, removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "ptrain-launcher-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Bounds that hold on a loaded 2-core machine (stalls of half a second happen there): the workers
// of a test sleep 30 s, so a launcher that ends within the first bound did not wait for them; waits
// for a process or a file give up after the second, and cost nothing when it is not needed.
constexpr double kLongBeforeTheSleeps = 20;
constexpr std::chrono::milliseconds kSettle{20000};

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const Clock::time_point end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// Gone, or a zombie nobody reaps (an orphan's new parent in a container may never wait).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t paren = stat.rfind(')');
  return paren == std::string::npos || (paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

// A worker's `echo $$ > file` creates the file before it writes the pid: wait for the newline.
bool pid_written(const std::string& path) {
  const std::string text = read_text(path);
  return !text.empty() && text.back() == '\n';
}

pid_t read_pid(const std::string& path) {
  return static_cast<pid_t>(std::stol(read_text(path)));
}

struct Launch {
  int status = 0;  // raw waitpid status of the launcher process
  std::string out;
  std::string err;
  double seconds = 0;

  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// Runs launch_local in a forked child with stdout/stderr redirected to files. `env` is set in
// the child before launching; `during` runs in the test meanwhile, given the launcher's pid.
Launch run_launcher(const ScratchDir& dir, const LaunchOptions& options,
                    const std::map<std::string, std::string>& env = {},
                    const std::function<void(pid_t)>& during = {}) {
  const std::string out_path = dir.file("launcher.out");
  const std::string err_path = dir.file("launcher.err");
  const Clock::time_point start = Clock::now();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::FILE* out = std::freopen(out_path.c_str(), "w", stdout);
    std::FILE* err = std::freopen(err_path.c_str(), "w", stderr);
    if (out == nullptr || err == nullptr) ::_exit(98);
    ::unsetenv("PTRAIN_JOB_TOKEN");
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    if (env.count("PTRAIN_TEST_IGNORE") != 0) {  // as under nohup in the background of a script
      ::signal(SIGHUP, SIG_IGN);
      ::signal(SIGINT, SIG_IGN);
    }
    if (env.count("PTRAIN_TEST_BLOCK") != 0) {  // as `ptrain run` does before it launches
      sigset_t stop;
      sigemptyset(&stop);
      sigaddset(&stop, SIGTERM);
      ::sigprocmask(SIG_BLOCK, &stop, nullptr);
      if (env.count("PTRAIN_TEST_PENDING") != 0) ::raise(SIGTERM);  // a stop before the launch: pending
    }
    if (const auto nofile = env.find("PTRAIN_TEST_NOFILE"); nofile != env.end()) {  // "soft:hard"
      const std::size_t colon = nofile->second.find(':');
      const rlimit limit{std::stoul(nofile->second.substr(0, colon)), std::stoul(nofile->second.substr(colon + 1))};
      if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(97);
    }
    int rc = 0;
    try {
      rc = launch_local(options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "exception: %s\n", e.what());
      rc = 99;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  if (during) {
    try {
      during(pid);
    } catch (...) {  // a failed REQUIRE: leave no launcher behind
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      throw;
    }
  }
  Launch result;
  REQUIRE(::waitpid(pid, &result.status, 0) == pid);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.out = read_text(out_path);
  result.err = read_text(err_path);
  return result;
}

LaunchOptions shell_workers(int nproc, const std::string& script) {
  LaunchOptions options;
  options.nproc = nproc;
  options.argv = {"/bin/sh", "-c", script, "worker"};
  return options;
}

// Waits (in the worker script) until every file named here exists and is non-empty.
std::string await_files(const std::vector<std::string>& paths) {
  std::string script;
  for (const std::string& p : paths)
    script += "n=0; while [ ! -s " + p + " ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done; ";
  return script;
}

}  // namespace

TEST_CASE("workers get their rank, world, address, port and one shared token and their output is passed on") {
  ScratchDir dir;
  const Launch run = run_launcher(
      dir,
      shell_workers(
          3,
          "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
          "$PTRAIN_JOB_TOKEN $PTRAIN_LAUNCHED ${PTRAIN_STORE_FD:-none}\"; echo \"to stderr $RANK\" >&2"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code() == 0);
  std::map<int, std::vector<std::string>> fields;
  for (const std::string& line : lines_of(run.out)) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    REQUIRE(word == "env");  // as the worker wrote it: the launcher adds no prefix of its own
    std::vector<std::string> values;
    while (in >> word) values.push_back(word);
    REQUIRE(values.size() == 9);
    fields[std::stoi(values[0])] = values;
  }
  REQUIRE(fields.size() == 3);
  for (const auto& [rank, v] : fields) {
    CHECK(v[1] == "3");
    CHECK(v[2] == std::to_string(rank));
    CHECK(v[3] == "3");
    CHECK(v[4] == "127.0.0.1");
    CHECK(std::stoi(v[5]) > 0);
    CHECK(v[5] == fields[0][5]);
    CHECK(v[6].size() == 32);
    CHECK(v[6] == fields[0][6]);
    CHECK(v[7] == "1");
    CHECK((v[8] != "none") == (rank == 0));
  }
  for (int rank = 0; rank < 3; ++rank) {
    CHECK_THAT(run.err, Catch::Contains("to stderr " + std::to_string(rank) + "\n"));
  }
}

TEST_CASE("an inherited PTRAIN_JOB_TOKEN is passed on, stale rank variables are not") {
  ScratchDir dir;
  const Launch run =
      run_launcher(dir, shell_workers(2, "echo \"$RANK $PTRAIN_JOB_TOKEN ${PTRAIN_STORE_FD:-none}\""),
                   {{"PTRAIN_JOB_TOKEN", "fromparent"}, {"RANK", "7"}, {"PTRAIN_STORE_FD", "99"}});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code() == 0);
  CHECK_THAT(run.out, Catch::Contains("1 fromparent none\n"));
  CHECK_THAT(run.out, Catch::Contains("0 fromparent "));
  CHECK_THAT(run.out, !Catch::Contains("99"));
}

TEST_CASE("rank 0 inherits the store's listening socket and no other process keeps a copy") {
  ScratchDir dir;
  // Rank 0: the descriptor is a socket listening (state 0A) on 127.0.0.1:MASTER_PORT.
  const std::string rank0 =
      "inode=$(readlink /proc/$$/fd/$PTRAIN_STORE_FD | tr -dc 0-9); port=$(printf '%04X' $MASTER_PORT); "
      "awk -v i=\"$inode\" -v a=\"0100007F:$port\" '$2==a && $4==\"0A\" && $10==i {f=1} END {exit !f}' "
      "/proc/net/tcp && echo listening; ";
  // Rank 1: no socket among its descriptors, and the launcher closes its copy after spawning.
  const std::string count_sockets =
      "count() { n=0; for f in /proc/$1/fd/*; do case $(readlink $f) in socket:*) n=$((n+1));; esac; done; "
      "echo $n; }; ";
  const std::string rank1 =
      "echo own_sockets=$(count $$); i=0; while [ $(count $PPID) != 0 ] && [ $i -lt 200 ]; do sleep 0.01; "
      "i=$((i+1)); done; echo launcher_sockets=$(count $PPID)";
  const Launch run = run_launcher(
      dir, shell_workers(2, count_sockets + "if [ $RANK = 0 ]; then " + rank0 + "else " + rank1 + "; fi"));
  INFO(run.out << run.err);
  REQUIRE(run.exit_code() == 0);
  CHECK_THAT(run.out, Catch::Contains("listening\n"));  // rank 0's; the others', rank 1's
  CHECK_THAT(run.out, Catch::Contains("own_sockets=0\n"));
  CHECK_THAT(run.out, Catch::Contains("launcher_sockets=0\n"));
}

TEST_CASE("long lines are split into 64 KiB pieces, never dropped, and a last partial line is flushed") {
  ScratchDir dir;
  const std::string z = dir.file("z");
  // x: written in small pieces, its newline later; y: exactly 64 KiB; z: a long line that arrives
  // with its newline in the same reads; then a line without newline at exit.
  const Launch run = run_launcher(
      dir, shell_workers(
               1,
               "head -c 150000 /dev/zero | tr '\\0' x; echo; head -c 65536 /dev/zero | tr '\\0' y; echo; "
               "head -c 70000 /dev/zero | tr '\\0' z > " +
                   z + "; echo >> " + z + "; cat " + z + "; printf 'no newline'"));
  REQUIRE(run.exit_code() == 0);
  const std::vector<std::string> lines = lines_of(run.out);
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] == std::string(65536, 'x'));
  CHECK(lines[1] == std::string(65536, 'x'));
  CHECK(lines[2] == std::string(150000 - 2 * 65536, 'x'));
  CHECK(lines[3] == std::string(65536, 'y'));
  CHECK(lines[4] == std::string(65536, 'z'));
  CHECK(lines[5] == std::string(70000 - 65536, 'z'));
  CHECK(lines[6] == "no newline");
}

TEST_CASE("a failing worker is reported with its last lines and the others are taken down") {
  ScratchDir dir;
  const std::string d = dir.str();
  // Ranks 0 and 2 wait with a child of their own (it must die too); rank 1 prints, then fails.
  const std::string waiter =
      "sleep 30 & echo $! > " + d + "/child.$RANK; echo $$ > " + d + "/pid.$RANK; wait";
  const std::string failer = "i=1; while [ $i -le 12 ]; do echo line $i; i=$((i+1)); done; " +
                             await_files({d + "/pid.0", d + "/pid.2"}) + "exit 3";
  const Launch run =
      run_launcher(dir, shell_workers(3, "if [ $RANK = 1 ]; then " + failer + "; else " + waiter + "; fi"));
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 1);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  // One report, a log line each line: "<time> [<who>] launch error: <line>".
  CHECK_THAT(run.err, Catch::Contains("error: rank 1 (host " + std::string(host) + ", pid ") &&
                          Catch::Contains(") exited with code 3\n") &&
                          Catch::Contains(" launch error: last output of rank 1:\n") &&
                          Catch::Contains(" launch error:   line 3\n"));
  CHECK_THAT(run.err, Catch::Contains("  line 12\n"));
  CHECK_THAT(run.err, !Catch::Contains("  line 2\n"));
  for (const char* name : {"pid.0", "pid.2", "child.0", "child.2"}) {
    INFO(name);
    const pid_t pid = read_pid(dir.file(name));
    CHECK(wait_until([&] { return process_gone(pid); }, kSettle));
  }
}

TEST_CASE("an error every rank says is shown once, the other ranks named once") {
  // Four ranks meeting the same bad input each logged it, and the report repeated it: five times.
  // (Each waits for all four to have started, and ignores SIGTERM: each says it whichever fails first.)
  ScratchDir dir;
  const std::string d = dir.str();
  const std::string said = "data error: data: val.bin: expected at least one file matching this pattern";
  const Launch run = run_launcher(
      dir, shell_workers(4, "trap '' TERM; echo up > " + d + "/up.$RANK; " +
                                await_files({d + "/up.0", d + "/up.1", d + "/up.2", d + "/up.3"}) +
                                "echo \"2026-12-07T04:00:00.000Z [rank $RANK/4 h local $RANK] " + said +
                                "\" >&2; exit 2"));
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 2);
  std::size_t shown = 0;
  for (std::size_t at = run.err.find(said); at != std::string::npos; at = run.err.find(said, at + 1)) ++shown;
  CHECK(shown == 1);
  const std::size_t at = run.err.find(said);
  REQUIRE(at != std::string::npos);
  const char first = run.err[run.err.rfind("[rank ", at) + 6];  // the rank whose line was shown
  const std::map<char, std::string> others = {{'0', "1-3"}, {'1', "0, 2-3"}, {'2', "0-1, 3"}, {'3', "0-2"}};
  REQUIRE(others.count(first) == 1);
  CHECK_THAT(run.err, Catch::Contains(std::string("rank ") + first + "'s error above was repeated by ranks " +
                                      others.at(first) + " (the same error"));
  CHECK_THAT(run.err, Catch::Contains("besides its error above: (none)"));
}

TEST_CASE("a failure report names the ranks that had already exited 0") {
  // A rank that left mid-run with exit 0 went unmentioned; the report blamed the rank left waiting.
  ScratchDir dir;
  const std::string d = dir.str();
  // Rank 0 fails 0.5 s after rank 1 has started exiting 0 (not 0.5 s after its own start, which a
  // loaded machine could put before rank 1's).
  const Launch run = run_launcher(
      dir, shell_workers(2, "if [ $RANK = 1 ]; then echo up > " + d + "/up.1; exit 0; else " +
                                await_files({d + "/up.1"}) + "sleep 0.5; exit 1; fi"));
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 1);
  CHECK_THAT(run.err, Catch::Contains("error: rank 0") && Catch::Contains("rank 1 had exited 0, "));
}

TEST_CASE("a worker's leftover children are killed and do not keep the launcher waiting") {
  ScratchDir dir;
  const Launch run =
      run_launcher(dir, shell_workers(1, "sleep 30 & echo $! > " + dir.file("child") + "; echo done"));
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 0);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.out, Catch::Contains("done\n"));
  const pid_t child = read_pid(dir.file("child"));
  CHECK(wait_until([&] { return process_gone(child); }, kSettle));
}

TEST_CASE("a worker killed by a signal is reported with the signal's number and name") {
  ScratchDir dir;
  const Launch run =
      run_launcher(dir, shell_workers(2, "if [ $RANK = 0 ]; then echo bye; kill -9 $$; fi; exec sleep 30"));
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 1);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.err,
             Catch::Contains("error: rank 0 (host ") && Catch::Contains("was killed by signal 9 (SIGKILL)\n") &&
                 Catch::Contains(" launch error: last output of rank 0:\n") && Catch::Contains(" launch error:   bye\n"));
}

TEST_CASE("workers that ignore SIGTERM after a failure are killed once the grace period ends") {
  ScratchDir dir;
  const std::string d = dir.str();
  LaunchOptions options =
      shell_workers(2, "if [ $RANK = 0 ]; then " + await_files({d + "/pid.1"}) +
                           "exit 5; else trap '' TERM; echo $$ > " + d + "/pid.1; sleep 30; fi");
  options.grace_seconds = 0.5;
  const Launch run = run_launcher(dir, options);
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 1);
  CHECK(run.seconds >= 0.5);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.err, Catch::Contains("rank 0") && Catch::Contains("exited with code 5"));
  const pid_t pid = read_pid(dir.file("pid.1"));
  CHECK(wait_until([&] { return process_gone(pid); }, kSettle));
}

TEST_CASE("stop signals are forwarded and workers that exit 0 make the launcher exit 0") {
  ScratchDir dir;
  const std::string d = dir.str();
  const int sig = GENERATE(SIGTERM, SIGINT, SIGHUP);
  // SIGHUP reaches the workers as SIGTERM; the others as themselves.
  const std::string trapped = sig == SIGINT ? "INT" : "TERM";
  INFO("signal " << sig);
  const Launch run =
      run_launcher(dir,
                   shell_workers(2, "trap 'echo stopping $RANK; exit 0' " + trapped + "; echo x > " + d +
                                        "/ready.$RANK; sleep 30 & wait"),
                   {}, [&](pid_t launcher) {
                     REQUIRE(wait_until(
                         [&] { return fs::exists(d + "/ready.0") && fs::exists(d + "/ready.1"); }, kSettle));
                     ::kill(launcher, sig);
                   });
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 0);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.out, Catch::Contains("stopping 0\n") && Catch::Contains("stopping 1\n"));
  CHECK_THAT(run.err, Catch::Contains("asking the workers to stop"));
}

TEST_CASE("signals the caller ignores stay ignored, and workers start with default signal actions") {
  ScratchDir dir;
  const std::string d = dir.str();
  bool hangup_ignored = false;
  const Launch run = run_launcher(
      dir,
      shell_workers(
          1,
          "echo ignored=$(awk '/^SigIgn/ {print $2}' /proc/$$/status); trap 'echo stopping; exit 0' "
          "TERM; echo x > " +
              d + "/ready; sleep 30 & wait"),
      {{"PTRAIN_TEST_IGNORE", "1"}}, [&](pid_t launcher) {
        REQUIRE(wait_until([&] { return fs::exists(d + "/ready"); }, kSettle));
        ::kill(launcher, SIGHUP);  // like nohup: must not stop the job
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        hangup_ignored = ::waitpid(launcher, nullptr, WNOHANG) == 0;
        ::kill(launcher, SIGTERM);
      });
  INFO(run.out << run.err);
  CHECK(hangup_ignored);
  CHECK(run.exit_code() == 0);
  CHECK_THAT(run.out, Catch::Contains("stopping\n"));
  CHECK_THAT(run.err, !Catch::Contains("SIGHUP"));
  // The worker's ignored-signal mask has neither SIGHUP (bit 0), SIGINT (bit 1) nor SIGTERM (bit 14).
  const std::size_t at = run.out.find("ignored=");
  REQUIRE(at != std::string::npos);
  const unsigned long long ignored = std::stoull(run.out.substr(at + 8, 16), nullptr, 16);
  CHECK((ignored & 0x4003u) == 0);
}

TEST_CASE("workers start with the caller's signal mask, not the launcher's") {
  // `ptrain run` blocks the stop signals from its start, so that its workers hold a signal the
  // launcher forwards before they have installed their handler until they are ready for it.
  ScratchDir dir;
  const bool caller_blocks = GENERATE(false, true);
  INFO("the caller blocks SIGTERM: " << caller_blocks);
  std::map<std::string, std::string> env;
  if (caller_blocks) env["PTRAIN_TEST_BLOCK"] = "1";
  const Launch run =
      run_launcher(dir, shell_workers(1, "echo blocked=$(awk '/^SigBlk/ {print $2}' /proc/$$/status)"), env);
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 0);
  const std::size_t at = run.out.find("blocked=");
  REQUIRE(at != std::string::npos);
  const unsigned long long blocked = std::stoull(run.out.substr(at + 8, 16), nullptr, 16);
  CHECK(((blocked >> (SIGTERM - 1)) & 1u) == (caller_blocks ? 1u : 0u));
  CHECK((blocked & (1u << (SIGCHLD - 1))) == 0);  // the launcher's own blocked set stays its own
}

TEST_CASE("a stop signal after a rank failed on bad input ends the rest, and the job still exits 2") {
  // It was taken for a second signal: "again, killing all workers", and exit 1.
  ScratchDir dir;
  const std::string d = dir.str();
  LaunchOptions options = shell_workers(2, "if [ $RANK = 0 ]; then " + await_files({d + "/pid.1"}) +
                                               "exit 2; else trap '' TERM; echo $$ > " + d + "/pid.1; sleep 30; fi");
  options.grace_seconds = 20;
  const Launch run = run_launcher(dir, options, {}, [&](pid_t launcher) {
    REQUIRE(wait_until(
        [&] { return read_text(dir.file("launcher.err")).find("exited with code 2") != std::string::npos; },
        kSettle));
    ::kill(launcher, SIGTERM);
  });
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 2);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.err, Catch::Contains("SIGTERM after a rank failed, killing the other workers"));
  CHECK_THAT(run.err, !Catch::Contains("again"));
  CHECK(wait_until([&] { return process_gone(read_pid(dir.file("pid.1"))); }, kSettle));
}

TEST_CASE("a second stop signal within the grace period kills the workers") {
  ScratchDir dir;
  const std::string d = dir.str();
  const Launch run = run_launcher(
      dir, shell_workers(2, "trap '' INT; echo $$ > " + d + "/pid.$RANK; sleep 30"), {}, [&](pid_t launcher) {
        REQUIRE(wait_until([&] { return pid_written(d + "/pid.0") && pid_written(d + "/pid.1"); }, kSettle));
        ::kill(launcher, SIGINT);  // the workers set their traps before writing their pids
        // Two signals pending at once would merge into one: send the second once the first was read.
        REQUIRE(wait_until(
            [&] {
              return read_text(dir.file("launcher.err")).find("asking the workers to stop") !=
                     std::string::npos;
            },
            kSettle));
        ::kill(launcher, SIGINT);
      });
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 1);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.err, Catch::Contains("again, killing all workers"));
  CHECK_THAT(run.err, !Catch::Contains("error: rank"));
  for (const char* name : {"pid.0", "pid.1"}) {
    const pid_t pid = read_pid(dir.file(name));
    CHECK(wait_until([&] { return process_gone(pid); }, kSettle));
  }
}

TEST_CASE("a stop signal before the workers are spawned starts none of them") {
  // The launcher went on spawning every worker (16,384 for a 405B job) before it read a stop; a
  // signal that is pending when it starts is read before the first spawn, as one between spawns is.
  ScratchDir dir;
  const std::string d = dir.str();
  const Launch run = run_launcher(dir, shell_workers(8, "echo x > " + d + "/started.$RANK"),
                                  {{"PTRAIN_TEST_BLOCK", "1"}, {"PTRAIN_TEST_PENDING", "1"}});
  INFO(run.out << run.err);
  CHECK(run.exit_code() == 0);
  CHECK(run.seconds < kLongBeforeTheSleeps);
  CHECK_THAT(run.err, Catch::Contains("launch info: SIGTERM before any worker started: nothing to save\n") &&
                          Catch::Contains("launch warning: started 0 of 8 workers; starting no more\n"));
  CHECK_FALSE(fs::exists(d + "/started.0"));
  CHECK(run.out.empty());
}

TEST_CASE("an open-file limit too low for the workers' pipes is raised to the hard limit, or refused first") {
  ScratchDir dir;
  const std::string d = dir.str();
  // 40 workers hold 80 pipe ends: past a limit of 48, which the launcher raises when the hard limit allows.
  const LaunchOptions options = shell_workers(40, "echo x > " + d + "/started.$RANK");
  const Launch raised = run_launcher(dir, options, {{"PTRAIN_TEST_NOFILE", "48:4096"}});
  INFO(raised.out << raised.err);
  CHECK(raised.exit_code() == 0);
  CHECK(fs::exists(d + "/started.39"));
  fs::remove(d + "/started.0");
  // It failed halfway before, with a worker's pipe ("Too many open files"), 20 workers started.
  const Launch refused = run_launcher(dir, options, {{"PTRAIN_TEST_NOFILE", "48:48"}});
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code() == 99);  // LaunchConfigError: `ptrain run` exits 2
  CHECK_THAT(refused.err, Catch::Contains("for 40 workers (two pipes each), but the open-file limit (RLIMIT_NOFILE) "
                                          "is 48 and at most 48: start fewer ranks on this machine"));
  CHECK_FALSE(fs::exists(d + "/started.0"));
}

TEST_CASE("workers die with the launcher when it is killed outright") {
  ScratchDir dir;
  const std::string d = dir.str();
  const Launch run = run_launcher(
      dir, shell_workers(2, "echo $$ > " + d + "/pid.$RANK; exec sleep 30"), {}, [&](pid_t launcher) {
        REQUIRE(wait_until([&] { return pid_written(d + "/pid.0") && pid_written(d + "/pid.1"); }, kSettle));
        ::kill(launcher, SIGKILL);
      });
  CHECK(WIFSIGNALED(run.status));
  for (const char* name : {"pid.0", "pid.1"}) {
    const pid_t pid = read_pid(dir.file(name));
    CHECK(wait_until([&] { return process_gone(pid); }, kSettle));
  }
}

TEST_CASE("a worker command that cannot be executed fails with code 127 and says why") {
  ScratchDir dir;
  LaunchOptions options;
  options.nproc = 2;
  options.argv = {"/nonexistent/ptrain", "run"};
  const Launch run = run_launcher(dir, options);
  INFO(run.err);
  CHECK(run.exit_code() == 1);
  CHECK_THAT(run.err, Catch::Contains("exited with code 127"));
  CHECK_THAT(run.err, Catch::Contains("cannot execute /nonexistent/ptrain: No such file or directory"));
}

TEST_CASE("invalid options and a taken port are refused before any worker starts") {
  LaunchOptions options = shell_workers(1, "true");
  options.nproc = 0;
  CHECK_THROWS_AS(launch_local(options), LaunchConfigError);
  options = shell_workers(1, "true");
  options.argv.clear();
  CHECK_THROWS_AS(launch_local(options), LaunchConfigError);
  options = shell_workers(1, "true");
  options.master_port = 70000;
  CHECK_THROWS_AS(launch_local(options), LaunchConfigError);

  // Hold a port, then ask the launcher for it.
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(holder >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(holder, 1) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  options = shell_workers(1, "true");
  options.master_port = ntohs(address.sin_port);
  CHECK_THROWS_AS(launch_local(options), DistError);
  ::close(holder);
}
