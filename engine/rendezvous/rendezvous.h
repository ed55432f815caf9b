// How a worker joins its job through the rendezvous store (docs/launching.md, "Rendezvous"). Rank 0 hosts the
// store (on the socket the local launcher inherited to it, or bound to the store address), every
// rank connects with the job token, checks that the store is its own job's and claims its rank
// there; the ranks agree on their collectives backend from what each offers, and the store carries
// the job's abort flag: when a rank fails, it posts the reason, every other rank's watchdog reads
// it. The world Comm connected through the store, and the watchdog, are comm/session.h's.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/launch/worker_env.h"
#include "engine/rendezvous/store.h"

namespace ptrain::dist {

// A rank's connections to its job's store, once it joined.
struct JobStore {
  std::unique_ptr<StoreServer> server;        // rank 0 hosts the store; nullptr elsewhere
  std::unique_ptr<StoreClient> client;        // the rank's own requests
  // The abort watchdog's, so it never waits behind the rank's; it gives up on a store that does not
  // answer within min(comm.timeout_s, 60 s) (a stopped rank 0 takes the store with it).
  std::unique_ptr<StoreClient> watch_client;
};

// Joins the job described by `env`; `timeout` bounds connecting and every wait.
// `job_identity` is what every rank of the job has in common (the app's digest of the job file and
// its --set overrides): rank 0 publishes it with the world size, every other rank compares, then
// each rank claims its rank number in the store, once. So a process of another job that reaches
// this store (the same port and token by mistake) fails at once with a LaunchConfigError naming the
// store's host:port, instead of joining: "belongs to another job" when its identity differs, "rank
// R is already taken" when it is a second process for a rank (then the job goes on with the
// first). A wrong token fails the same way, as a DistError from the store client. Rank 0 returns
// once every rank claimed its rank, else names the ranks that did not.
JobStore join_job(const WorkerEnv& env, const std::string& job_identity, std::chrono::milliseconds timeout);

// Every rank publishes the GPU it offers for NCCL (`gpu`, empty for none); rank 0 decides for the
// whole job, so every rank agrees: "nccl" when every rank offers a GPU and no two offer the same
// one (ranks sharing a GPU cannot share an NCCL communicator), else why not (then Gloo).
std::string agree_on_backend(StoreClient& store, const WorkerEnv& env, const std::string& gpu,
                             std::chrono::milliseconds timeout);

// The job's abort flag. post_abort: this rank failed (`reason` names it); read_abort: the posted
// reason, counting this rank among its readers, or nothing while there is none;
// wait_for_abort_readers: rank 0 keeps the store up until `readers` ranks (every other live rank) have read it,
// or two seconds at most (a dead rank never reads it).
void post_abort(StoreClient& store, const std::string& reason);
std::optional<std::string> read_abort(StoreClient& store);
void wait_for_abort_readers(StoreClient& store, int readers);

// Heartbeats (comm/heartbeat.h holds what they say): post_heartbeat replaces this rank's;
// read_heartbeats returns every rank's of `world`, nullopt where a rank posted none.
void post_heartbeat(StoreClient& store, int rank, const std::string& beat);
std::vector<std::optional<std::string>> read_heartbeats(StoreClient& store, int world);

// The local address this machine uses to reach host:port (what peers should connect back to).
std::string local_address_towards(const std::string& host, int port);

}  // namespace ptrain::dist
