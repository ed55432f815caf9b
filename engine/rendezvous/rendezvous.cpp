#include "engine/rendezvous/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "engine/launch/dist_error.h"
#include "engine/log/log.h"

namespace ptrain::dist {
namespace {

constexpr const char* kAbortKey = "ptrain/abort";
constexpr const char* kAbortSeenKey = "ptrain/abort_seen";  // how many watchdogs read the reason
constexpr auto kReadersGrace = std::chrono::seconds(2);     // a dead rank never reads it
constexpr auto kReadersPoll = std::chrono::milliseconds(20);
constexpr const char* kBackendKey = "ptrain/comm_backend";
constexpr const char* kJobIdentityKey = "ptrain/job_identity";  // rank 0's

std::string heartbeat_key(int rank) { return "ptrain/heartbeat/" + std::to_string(rank); }
std::string offer_key(int rank) { return "ptrain/nccl_offer/" + std::to_string(rank); }
std::string rank_claim_key(int rank) { return "ptrain/rank_claims/" + std::to_string(rank); }

// The same port and token can reach another job's store (a token from a static environment, two
// launches of one job): the identity check keeps out another job, the claim a second process for
// a rank, whichever comes first. Identity first, so a stranger claims nothing.
void check_identity_and_claim(StoreClient& store, const WorkerEnv& env, const std::string& job_identity,
                              std::chrono::milliseconds timeout) {
  const std::string advice = "give each job its own MASTER_PORT and PTRAIN_JOB_TOKEN";
  const std::string mine = std::to_string(env.world) + " ranks, job " + job_identity;
  if (env.rank == 0) {
    store.set(kJobIdentityKey, mine);
  } else if (const std::vector<char> theirs = store.get(kJobIdentityKey, timeout);
             std::string(theirs.begin(), theirs.end()) != mine) {
    throw LaunchConfigError("the store at " + store.endpoint() +
                            " belongs to another job: its rank 0 runs another job file, other --set overrides "
                            "or another world size than this rank (" +
                            std::to_string(env.world) + " ranks); " + advice +
                            ", and start every rank of a job with the same job file and overrides");
  }
  if (const std::int64_t claims = store.add(rank_claim_key(env.rank), 1); claims != 1) {
    throw LaunchConfigError("rank " + std::to_string(env.rank) + " is already taken in the store at " +
                            store.endpoint() +
                            ": another process with this job's token and job file claimed it first (one job "
                            "launched twice on one port?); " + advice);
  }
}

// Rank 0 waits for every rank's claim, so that a rank that never starts, or refuses its job and
// exits, is named here rather than as a key deep inside the transport's connection.
void await_every_rank(StoreClient& store, int world, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(rank_claim_key(r));
  try {
    store.wait(keys, timeout);
  } catch (const DistError&) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < world; ++r) {
      if (store.check({rank_claim_key(r)})) continue;
      if (++count <= 10) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count == 0) throw;
    if (count > 10) missing += " and " + std::to_string(count - 10) + " more";
    throw DistError((count == 1 ? "rank " : "ranks ") + missing + " did not join the job within comm.timeout_s (" +
                    std::to_string(timeout.count() / 1000) + " s): did " + (count == 1 ? "it" : "they") +
                    " start, with this job's MASTER_ADDR, MASTER_PORT and PTRAIN_JOB_TOKEN? (a rank that refuses "
                    "its job says why on its own output and exits 2)");
  }
}

// Rank 0 reads every rank's offered GPU and decides: "nccl", or why not (then Gloo).
std::string decide_backend(StoreClient& store, int world, std::chrono::milliseconds timeout) {
  std::map<std::string, int> owner;  // GPU UUID -> the first rank that offered it
  for (int r = 0; r < world; ++r) {
    const std::vector<char> value = store.get(offer_key(r), timeout);
    const std::string gpu(value.begin(), value.end());
    if (gpu.empty()) return "rank " + std::to_string(r) + " computes on the CPU or has no NCCL";
    const auto [it, fresh] = owner.emplace(gpu, r);
    if (!fresh)
      return "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " share GPU " + gpu +
             " (an NCCL communicator needs one GPU per rank)";
  }
  return "nccl";
}

}  // namespace

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr)
    throw DistError("cannot resolve the store host '" + host + "'");
  std::string address;
  // A connected UDP socket sends nothing but tells which local address routes to the host.
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* raw = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) address = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (address.empty()) throw DistError("no local address routes to the store host '" + host + "'");
  return address;
}

JobStore join_job(const WorkerEnv& env, const std::string& job_identity, std::chrono::milliseconds timeout) {
  JobStore s;
  if (env.rank == 0) {
    const std::size_t clients = kStoreClientsPerRank * static_cast<std::size_t>(env.world);
    s.server = env.store_fd >= 0
                   ? std::make_unique<StoreServer>(env.store_fd, env.token, kStoreHandshakeTimeout, clients)
                   : std::make_unique<StoreServer>(env.store_host, env.store_port, env.token, kStoreHandshakeTimeout,
                                                   clients);
  }
  s.client = std::make_unique<StoreClient>(env.store_host, env.store_port, env.token, timeout);
  check_identity_and_claim(*s.client, env, job_identity, timeout);
  log::store().debug("rank {} of {} joined the job at the store {}:{}{}", env.rank, env.world, env.store_host,
                     env.store_port, env.rank == 0 ? " (its host)" : "");
  if (env.rank == 0) {
    await_every_rank(*s.client, env.world, timeout);
    log::store().debug("all {} ranks joined", env.world);
  }
  s.watch_client = std::make_unique<StoreClient>(env.store_host, env.store_port, env.token, timeout,
                                                 std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(60)));
  return s;
}

std::string agree_on_backend(StoreClient& store, const WorkerEnv& env, const std::string& gpu,
                             std::chrono::milliseconds timeout) {
  store.set(offer_key(env.rank), gpu);
  if (env.rank == 0) store.set(kBackendKey, decide_backend(store, env.world, timeout));
  const std::vector<char> decided = store.get(kBackendKey, timeout);
  return std::string(decided.begin(), decided.end());
}

void post_abort(StoreClient& store, const std::string& reason) { store.set(kAbortKey, reason); }

std::optional<std::string> read_abort(StoreClient& store) {
  if (!store.check({kAbortKey})) return std::nullopt;
  const std::vector<char> value = store.get(kAbortKey, std::chrono::seconds(5));
  store.add(kAbortSeenKey, 1);
  return std::string(value.begin(), value.end());
}

void wait_for_abort_readers(StoreClient& store, int readers) {
  const auto deadline = std::chrono::steady_clock::now() + kReadersGrace;
  try {
    while (store.add(kAbortSeenKey, 0) < readers && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(kReadersPoll);
  } catch (const DistError&) {  // nothing to wait for without the store
  }
}

void post_heartbeat(StoreClient& store, int rank, const std::string& beat) { store.set(heartbeat_key(rank), beat); }

std::vector<std::optional<std::string>> read_heartbeats(StoreClient& store, int world) {
  std::vector<std::optional<std::string>> beats(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    if (!store.check({heartbeat_key(r)})) continue;
    const std::vector<char> value = store.get(heartbeat_key(r), std::chrono::seconds(1));
    beats[static_cast<std::size_t>(r)] = std::string(value.begin(), value.end());
  }
  return beats;
}

}  // namespace ptrain::dist
