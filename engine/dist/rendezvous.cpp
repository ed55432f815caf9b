#include "engine/dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "engine/dist/gloo_comm.h"

namespace ptrain::dist {
namespace {

constexpr const char* kAbortKey = "ptrain/abort";
constexpr const char* kAbortSeenKey = "ptrain/abort_seen";  // how many watchdogs read the reason
constexpr auto kReadersGrace = std::chrono::seconds(2);     // a dead rank never reads it
constexpr const char* kBackendKey = "ptrain/comm_backend";
constexpr auto kWatchPeriod = std::chrono::milliseconds(200);
constexpr const char* kJobIdentityKey = "ptrain/job_identity";  // rank 0's

std::string offer_key(int rank) { return "ptrain/nccl_offer/" + std::to_string(rank); }
std::string rank_claim_key(int rank) { return "ptrain/rank_claims/" + std::to_string(rank); }

// The same port and token can reach another job's store (a token from a static environment, two
// launches of one job): the identity check keeps out another job, the claim a second process for
// a rank, whichever comes first. Identity first, so a stranger claims nothing.
void join_job(StoreClient& store, const WorkerEnv& env, const std::string& job_identity,
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

std::unique_ptr<Session> rendezvous(const WorkerEnv& env, const std::string& job_identity,
                                    std::chrono::milliseconds timeout, const NcclOffer& offer) {
  std::unique_ptr<Session> s(new Session());
  s->env_ = env;
  if (env.rank == 0) {
    const std::size_t clients = kStoreClientsPerRank * static_cast<std::size_t>(env.world);
    s->server_ = env.store_fd >= 0
                     ? std::make_unique<StoreServer>(env.store_fd, env.token, kStoreHandshakeTimeout, clients)
                     : std::make_unique<StoreServer>(env.store_host, env.store_port, env.token,
                                                     kStoreHandshakeTimeout, clients);
  }
  s->client_ = std::make_unique<StoreClient>(env.store_host, env.store_port, env.token, timeout);
  join_job(*s->client_, env, job_identity, timeout);
  if (env.rank == 0) await_every_rank(*s->client_, env.world, timeout);
  s->watch_client_ = std::make_unique<StoreClient>(env.store_host, env.store_port, env.token, timeout);

  s->client_->set(offer_key(env.rank), offer.gpu);
  if (env.rank == 0) s->client_->set(kBackendKey, decide_backend(*s->client_, env.world, timeout));
  const std::vector<char> decided = s->client_->get(kBackendKey, timeout);
  const std::string backend(decided.begin(), decided.end());
  if (backend == "nccl") {
    // every rank offered a GPU, and with it NCCL
    if (offer.nccl == nullptr) throw DistError("the job chose NCCL, but this rank has no NCCL to connect with");
    NcclOptions options;
    options.timeout = timeout;
    options.compute_stream = offer.compute_stream;
    // From NCCL's watchdog thread, once the communicators are aborted: a hung or failed collective
    // ends this rank, and through the store every other. The Session outlives its Comm.
    options.on_failure = [session = s.get()](const std::string& what, const std::string& log) {
      std::fprintf(stderr, "error: %s\nlast collectives of this rank:\n%s", what.c_str(), log.c_str());
      std::fflush(stderr);
      session->report_abort(what);
      std::_Exit(1);  // a runtime failure
    };
    s->comm_ = offer.nccl->make_comm(*s->client_, env.rank, env.world, options);
  } else {
    if (env.rank == 0 && !offer.gpu.empty())
      std::fprintf(stderr, "note: collectives go through Gloo with host staging: %s\n", backend.c_str());
    GlooOptions options{local_address_towards(env.store_host, env.store_port), timeout};
    s->comm_ = make_gloo_comm(*s->client_, env.rank, env.world, options);
  }
  s->watchdog_ = std::thread([session = s.get()] { session->watch(); });
  return s;
}

Session::~Session() {
  stop_watch_ = true;
  if (watchdog_.joinable()) watchdog_.join();
}

void Session::watch() {
  while (!stop_watch_) {
    std::this_thread::sleep_for(kWatchPeriod);
    if (stop_watch_) return;
    std::string reason;
    try {
      if (!watch_client_->check({kAbortKey})) continue;
      const std::vector<char> value = watch_client_->get(kAbortKey, std::chrono::seconds(5));
      reason = std::string(value.begin(), value.end());
      watch_client_->add(kAbortSeenKey, 1);
    } catch (const DistError& e) {
      reason = std::string("the job's store is gone (") + e.what() + ")";
    }
    if (stop_watch_) return;
    // Another rank timed out waiting in a collective while this one was in none: most likely the
    // one it waited for (stalled, or stopped by a signal).
    const bool timed_out = reason.find("imed out") != std::string::npos;
    const std::string culprit = timed_out && !comm_->log().in_flight()
                                    ? " (this rank was in no collective: the others' timeout may have waited on it)"
                                    : "";
    std::fprintf(stderr, "error: rank %d stops%s: %s\nrank %d's last collectives:\n%s", env_.rank, culprit.c_str(),
                 reason.c_str(), env_.rank, comm_->log().dump().c_str());
    std::fflush(stderr);
    wait_for_readers(*watch_client_);
    // Let the failing rank exit first, so the launcher reports it rather than this echo.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::_Exit(1);
  }
}

void Session::report_abort(const std::string& what) {
  // A second caller waits for the first report to end, then has nothing to add.
  std::call_once(abort_reported_, [&] {
    stop_watch_ = true;  // this rank is the one reporting: its own watchdog must not answer
    if (watchdog_.joinable()) watchdog_.join();
    try {
      client_->set(kAbortKey, "rank " + std::to_string(env_.rank) + ": " + what);
    } catch (const DistError&) {
      return;  // the store is gone already: the others notice that themselves
    }
    wait_for_readers(*client_);
  });
}

void Session::wait_for_readers(StoreClient& client) const {
  if (!server_) return;
  const auto deadline = std::chrono::steady_clock::now() + kReadersGrace;
  try {
    while (client.add(kAbortSeenKey, 0) < env_.world - 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(kWatchPeriod / 10);
  } catch (const DistError&) {  // nothing to wait for without the store
  }
}

void Session::finish() {
  stop_watch_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  comm_->barrier(comm_->world_group());
}

}  // namespace ptrain::dist
