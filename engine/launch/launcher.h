// The local launcher of `ptrain run` (like torchrun, simpler): spawns one worker process per rank
// on this machine, relays their output line by line, forwards stop signals, and on the first
// worker failure reports it and takes the others down.
//
// Each worker gets PTRAIN_LAUNCHED=1, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT (the port actually bound), PTRAIN_JOB_TOKEN (the launcher's own value if set, else a
// fresh random one) and, for rank 0 only, PTRAIN_STORE_FD: the store's listening socket, bound by
// the launcher before any worker starts so that no rank can race for the port and a port of 0
// resolves to a free one. Workers read stdin from /dev/null.
//
// Behaviour:
// - Output: every line a worker writes to stdout/stderr appears on the launcher's stdout/stderr
//   as it is (a worker's log lines say which rank wrote them: engine/log); lines longer than 64 KiB
//   are split, a final partial line is flushed. The launcher's own lines are log lines too (launch).
// - SIGINT/SIGTERM to the launcher are forwarded to every worker as the same signal, SIGHUP as
//   SIGTERM (workers checkpoint and exit 0); a second one within grace_seconds sends SIGKILL.
//   A signal the caller ignores (nohup, a background job of a script) stays ignored; workers
//   start with these signals at their default action either way, and with the caller's signal
//   mask (not the launcher's): a caller that blocks the stop signals before it calls launch_local,
//   as `ptrain run` does from its start, gets workers that hold a signal forwarded before they
//   have installed their handler pending until they unblock it, instead of dying of it.
// - A stop signal that arrives while the workers are being spawned, or a worker that fails then,
//   ends the spawning at once: no further worker starts, those started are stopped as above (or
//   taken down as below), and the launcher returns as it would after them (0 for a stop). One
//   before any worker started ends the launch with none.
// - The first worker that exits non-zero or dies by a signal is reported (an error of the launch
//   logger) with its last tail_lines lines; the others get SIGTERM, then SIGKILL after grace_seconds.
// - A worker found stopped (SIGSTOP, SIGTSTP, a debugger) when another fails is named in the report as
//   what the others waited for, and killed at once (it cannot act on SIGTERM).
// - Restarts (max_restarts, `ptrain run --max-restarts N`): when an attempt ends in a runtime failure
//   (a worker died, hung past comm.timeout_s and was ended, or exited non-zero but 2) and no stop
//   signal came, every worker is started again, in the same layout, on a new store socket, up to
//   max_restarts times, each restart logged (a warning of the launch logger) with the failure (and
//   the failed worker's first error line, which after a hang names the rank that hung) and
//   resume_note(). Workers get PTRAIN_RESTART_ATTEMPT: 0 at first, k at the k-th restart. Bad input
//   (exit 2) is never retried; the last attempt's code is the launch's.
// - Workers run in their own process groups (a terminal's Ctrl-C reaches them only through the
//   launcher; signals go to the whole group, so a worker's own children get them too; what is
//   left of a group when its worker exits is killed) and die with SIGKILL if the launcher's
//   thread that called launch_local dies (PR_SET_PDEATHSIG).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ptrain::dist {

struct LaunchOptions {
  int nproc = 1;                          // workers to spawn, ranks 0..nproc-1
  std::vector<std::string> argv;          // the worker command, e.g. {"/usr/bin/ptrain", "run", "job.yaml"}
  std::string master_addr = "127.0.0.1";  // IPv4 address or host name the store listens on
  int master_port = 0;                    // 0: a free port
  double grace_seconds = 5;               // SIGTERM -> SIGKILL delay after a failure
  int tail_lines = 10;                    // lines of a failed worker's output repeated in the report
  int max_restarts = 0;                   // restarts after runtime failures (see Restarts above)
  // Appended to a restart's log line: where the workers resume and the steps lost ("; resuming from
  // step 8 ..."); nothing when empty.
  std::function<std::string()> resume_note;
};

// Runs the workers to completion (restarting them as above). Returns 0 when every worker exited 0,
// 2 when the first worker to fail exited 2 (bad input: a data file, a checkpoint), 1 when one failed otherwise or the
// workers had to be killed. Throws LaunchConfigError for invalid options or an open-file limit that
// cannot hold nproc workers' pipes (launcher_os.h: reserve_descriptors), and DistError when the
// store socket cannot be bound or a worker cannot be spawned (workers already started are
// killed and reaped first). Blocks SIGCHLD/SIGINT/SIGTERM/SIGHUP in the calling thread while it
// runs; call it from the main thread of a process that has no other threads expecting them.
int launch_local(const LaunchOptions& options);

}  // namespace ptrain::dist
