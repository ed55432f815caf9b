// dist::rendezvous: how a worker joins its job and connects its world Comm (docs/launching.md).
// The ranks meet in the store (rendezvous/rendezvous.h: rank 0 hosts it, every rank checks that it
// is its own job's and claims its rank there), agree on the backend, and connect the world Comm
// through it: NCCL when every rank computes on a GPU of its own, else Gloo. A watchdog thread then
// watches the store's abort flag: when any rank reports a fatal error (a collective timed out, a
// peer vanished), every other rank prints its collective log and exits 1, so a hang ends with the
// logs of all ranks, naming which one was where. The same thread posts the rank's heartbeat
// (comm/heartbeat.h) each time round; a call that times out reads them all and names the ranks that
// hung first in its error (rank 0, which hosts the store, as not answering when the store does not).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/comm/comm.h"
#include "engine/comm/nccl_comm.h"
#include "engine/launch/worker_env.h"
#include "engine/rendezvous/rendezvous.h"

namespace ptrain::dist {

// What this rank offers for NCCL: the UUID of the GPU it computes on (prefixed with NCCL_HOSTID
// when that is set, as NCCL itself identifies a GPU by host and device), the stream its kernels run
// on, and NCCL itself (the CUDA module's, kernels/backend_module.h). An empty `gpu` (the CPU
// backend, or a ptrain without NCCL) means Gloo for the whole job.
struct NcclOffer {
  std::string gpu;
  void* compute_stream = nullptr;
  const NcclBackend* nccl = nullptr;  // set whenever `gpu` is
};

class Session {
 public:
  ~Session();
  Comm& comm() { return *comm_; }
  // Tells every rank that this one failed (`what`), so they stop with their logs. Thread-safe; the
  // first report wins (NCCL's watchdog and the trainer may both report one failure).
  void report_abort(const std::string& what);
  // Collective end of a healthy run: stops the watchdog, then waits for every rank, so rank 0's
  // store stays up until nobody needs it.
  void finish();

 private:
  friend std::unique_ptr<Session> rendezvous(const WorkerEnv& env, const std::string& job_identity,
                                             std::chrono::milliseconds timeout, const NcclOffer& offer,
                                             int failure_exit_code);
  Session() = default;
  void watch();
  // Which ranks hung, for a call of this rank's that failed (Comm::set_failure_verdict).
  std::string judge_failure();
  // Rank 0 hosts the store: after an abort it keeps it up until every other rank has read the
  // reason (each watchdog counts itself in). Nothing elsewhere.
  void wait_for_readers(StoreClient& client) const;

  WorkerEnv env_;
  JobStore store_;
  std::unique_ptr<Comm> comm_;
  std::thread watchdog_;
  std::atomic<bool> stop_watch_{false};
  std::atomic<bool> store_silent_{false};  // the store did not answer a verdict's reads: post nothing
  std::atomic<int> silent_ranks_{0};       // ranks the verdict found not beating: they read no abort
  std::once_flag abort_reported_;
  int failure_exit_code_ = 1;
};

// Joins the job described by `env` (join_job: a process of another job, or a second one for a
// rank, fails at once naming the store), agrees on the backend from every rank's offer
// (agree_on_backend; with a note from rank 0 when GPUs were offered and Gloo was chosen) and
// connects the world Comm. `timeout` bounds connecting and every collective. On an NCCL failure
// the rank prints it with its collective log, reports it to every rank and exits 1, or
// `failure_exit_code` (a failure the job may restart from: app/run_restarts.h), as the watchdog does.
std::unique_ptr<Session> rendezvous(const WorkerEnv& env, const std::string& job_identity,
                                    std::chrono::milliseconds timeout, const NcclOffer& offer = {},
                                    int failure_exit_code = 1);

}  // namespace ptrain::dist
