// dist::rendezvous: how a worker joins its job (README "Launching"). Rank 0 hosts the store (on
// the socket the local launcher inherited to it, or bound to the store address), every rank
// connects with the job token, checks that the store is its own job's and claims its rank there,
// and the world Comm is connected through it: NCCL when every rank computes on a GPU of its own,
// else Gloo. A watchdog thread then watches the store's abort flag:
// when any rank reports a fatal error (a collective timed out, a peer vanished), every other rank
// prints its collective log and exits 1, so a hang ends with the logs of all ranks, naming which
// one was where.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/dist/comm.h"
#include "engine/dist/nccl_comm.h"
#include "engine/dist/store.h"
#include "engine/dist/worker_env.h"

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
                                             std::chrono::milliseconds timeout, const NcclOffer& offer);
  Session() = default;
  void watch();
  // Rank 0 hosts the store: after an abort it keeps it up until every other rank has read the
  // reason (each watchdog counts itself in), or two seconds at most. Nothing elsewhere.
  void wait_for_readers(StoreClient& client) const;

  WorkerEnv env_;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_, watch_client_;
  std::unique_ptr<Comm> comm_;
  std::thread watchdog_;
  std::atomic<bool> stop_watch_{false};
  std::once_flag abort_reported_;
};

// Joins the job described by `env`; `timeout` bounds connecting and every collective.
// `job_identity` is what every rank of the job has in common (the app's digest of the job file and
// its --set overrides): rank 0 publishes it with the world size, every other rank compares, then
// each rank claims its rank number in the store, once. So a process of another job that reaches
// this store (the same port and token by mistake) fails at once with a LaunchConfigError naming the
// store's host:port, instead of joining: "belongs to another job" when its identity differs, "rank
// R is already taken" when it is a second process for a rank (then the job goes on with the
// first). A wrong token fails the same way, as a DistError from the store client.
// Every rank publishes its offer; rank 0 decides for the whole job (so every rank agrees): NCCL
// when every rank offers a GPU and no two offer the same one (ranks sharing a GPU cannot share an
// NCCL communicator), else Gloo, with a note from rank 0 when GPUs were offered. On an NCCL failure
// the rank prints it with its collective log, reports it to every rank and exits 1.
std::unique_ptr<Session> rendezvous(const WorkerEnv& env, const std::string& job_identity,
                                    std::chrono::milliseconds timeout, const NcclOffer& offer = {});

// The local address this machine uses to reach host:port (what peers should connect back to).
std::string local_address_towards(const std::string& host, int port);

}  // namespace ptrain::dist
