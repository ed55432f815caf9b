// The logs of ptrain: one spdlog logger per subsystem (levels.h), each line written whole
// (line_sink.h) as
//   2026-12-06T23:45:01.123Z [rank 1/2 node3 local 1] comm warning: <message>
// the time in UTC to the millisecond, who wrote it (a rank of the job with its host and local rank;
// "[launcher node3]" for the local launcher; "[node3]" before a process knows its rank), the
// subsystem and the level (trace, debug, info, warning, error).
//
// Lines go to stderr and, once a rank opens it (add_file), to its log file. The loggers' levels
// are PTRAIN_LOG_LEVEL's (info by default). On stderr, unless PTRAIN_LOG_LEVEL is set, rank 0 (and
// the launcher, and a command that is no rank) shows info and up, the other ranks only warnings and
// errors; their info lines are in their files. Set, every rank's stderr shows what its loggers pass.
//
// What a command produces (the step line, the metrics JSONL, validate/plan/schedule reports) is
// output, not a log: it goes to stdout or its file, not through here.
#pragma once

#include <functional>
#include <optional>
#include <spdlog/logger.h>
#include <string>

#include "engine/log/levels.h"

namespace ptrain::log {

// Who writes the lines: a rank (with `rank`), else the process `role` ("launcher"; empty for a
// command that is no job's rank).
struct Identity {
  std::string host;
  std::optional<int> rank;
  int world = 1;
  int local_rank = 0;
  std::string role;
  std::string tag() const;  // "[rank 1/2 node3 local 1]", "[launcher node3]", "[node3]"
};

// This machine's host name ("localhost" where it has none).
std::string host_name();

// These three change where lines go and what they say: call them from the main thread while no
// other thread logs (at start-up, once the process knows who it is, before a job's threads start).
// Each logger at its level of `levels` (info until this is called).
void set_levels(const Levels& levels);
// Every line from now on starts with `who` ("[host]" until this is called).
void set_identity(const Identity& who);
// Every line from now on also goes to `path`, appended to (created with its directory), which starts
// with the lines logged before (up to 64 KiB of them); throws std::runtime_error naming the path and
// the cause when it cannot be opened.
void add_file(const std::string& path);

// While it lives, the lines meant for stderr go to `write` instead, whole lines with their newline:
// the local launcher's writer thread, which never blocks on a stalled terminal and keeps its own
// lines in order with its workers'. One at a time.
class TerminalRoute {
 public:
  explicit TerminalRoute(std::function<void(std::string)> write);
  ~TerminalRoute();
  TerminalRoute(const TerminalRoute&) = delete;
  TerminalRoute& operator=(const TerminalRoute&) = delete;
};

spdlog::logger& get(Subsystem s);
inline spdlog::logger& launch() { return get(Subsystem::launch); }
inline spdlog::logger& store() { return get(Subsystem::store); }
inline spdlog::logger& comm() { return get(Subsystem::comm); }
inline spdlog::logger& train() { return get(Subsystem::train); }
inline spdlog::logger& ckpt() { return get(Subsystem::ckpt); }
inline spdlog::logger& data() { return get(Subsystem::data); }
inline spdlog::logger& plan() { return get(Subsystem::plan); }
inline spdlog::logger& kernels() { return get(Subsystem::kernels); }

}  // namespace ptrain::log
