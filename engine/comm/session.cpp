#include "engine/comm/session.h"

#include <cstdio>
#include <cstdlib>

#include "engine/comm/gloo_comm.h"
#include "engine/comm/heartbeat.h"
#include "engine/log/log.h"

namespace ptrain::dist {
namespace {

constexpr auto kWatchPeriod = std::chrono::milliseconds(200);  // also the heartbeat's period
// A verdict reads the heartbeats twice this far apart: a live rank beats several times between.
constexpr auto kVerdictInterval = std::chrono::milliseconds(1000);
// How long a verdict waits for the store: one that does not answer is taken as rank 0 hung.
constexpr auto kVerdictStoreTimeout = std::chrono::seconds(2);

}  // namespace

std::unique_ptr<Session> rendezvous(const WorkerEnv& env, const std::string& job_identity,
                                    std::chrono::milliseconds timeout, const NcclOffer& offer,
                                    int failure_exit_code) {
  std::unique_ptr<Session> s(new Session());
  s->env_ = env;
  s->failure_exit_code_ = failure_exit_code;
  s->store_ = join_job(env, job_identity, timeout);
  const std::string backend = agree_on_backend(*s->store_.client, env, offer.gpu, timeout);
  log::comm().debug("collectives through {}", backend == "nccl" ? "NCCL" : "Gloo (" + backend + ")");
  if (backend == "nccl") {
    // every rank offered a GPU, and with it NCCL
    if (offer.nccl == nullptr) throw DistError("the job chose NCCL, but this rank has no NCCL to connect with");
    NcclOptions options;
    options.timeout = timeout;
    options.compute_stream = offer.compute_stream;
    // From NCCL's watchdog thread, once the communicators are aborted: a hung or failed collective
    // ends this rank, and through the store every other. The Session outlives its Comm.
    options.on_failure = [session = s.get()](const std::string& failure, const std::string& log) {
      const std::string what = lead_with_verdict(session->judge_failure(), failure);
      ::ptrain::log::comm().error("{}\nlast collectives of this rank:\n{}", what, log);
      session->report_abort(what);
      std::_Exit(session->failure_exit_code_);  // a runtime failure
    };
    s->comm_ = offer.nccl->make_comm(*s->store_.client, env.rank, env.world, options);
  } else {
    if (env.rank == 0 && !offer.gpu.empty())
      log::comm().info("collectives go through Gloo with host staging: {}", backend);
    GlooOptions options{local_address_towards(env.store_host, env.store_port), timeout};
    s->comm_ = make_gloo_comm(*s->store_.client, env.rank, env.world, options);
  }
  s->comm_->set_failure_verdict([session = s.get()] { return session->judge_failure(); });
  s->watchdog_ = std::thread([session = s.get()] { session->watch(); });
  return s;
}

Session::~Session() {
  stop_watch_ = true;
  if (watchdog_.joinable()) watchdog_.join();
}

void Session::watch() {
  std::uint64_t beats = 0;
  while (!stop_watch_) {
    std::this_thread::sleep_for(kWatchPeriod);
    if (stop_watch_) return;
    std::string reason;
    bool store_gone = false;
    try {
      post_heartbeat(*store_.watch_client, env_.rank, encode_heartbeat({++beats, comm_->log().latest()}));
      const std::optional<std::string> posted = read_abort(*store_.watch_client);
      if (!posted) continue;
      reason = *posted;
    } catch (const DistError& e) {
      // Rank 0 hosts the store: gone, or not answering (stopped, hung), it is what ends the job.
      reason = std::string("rank 0, which hosts the job's store, does not answer or is gone (") + e.what() + ")";
      store_gone = true;
    }
    if (stop_watch_) return;
    // Another rank timed out waiting in a collective while this one was in none: most likely the
    // one it waited for (stalled, or stopped by a signal).
    const bool timed_out = reason.find("imed out") != std::string::npos;
    const std::string culprit = timed_out && !comm_->log().in_flight()
                                    ? " (this rank was in no collective: the others' timeout may have waited on it)"
                                    : "";
    if (store_gone)  // the culprit first
      log::comm().error("{}: rank {} stops\nrank {}'s last collectives:\n{}", reason, env_.rank, env_.rank,
                        comm_->log().dump());
    else
      log::comm().error("rank {} stops{}: {}\nrank {}'s last collectives:\n{}", env_.rank, culprit, reason, env_.rank,
                        comm_->log().dump());
    wait_for_readers(*store_.watch_client);
    // Let the failing rank exit first, so the launcher reports it rather than this echo.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::_Exit(failure_exit_code_);
  }
}

std::string Session::judge_failure() {
  const std::optional<CollectivePosition> mine = comm_->log().latest();
  if (!mine) return {};
  try {
    // A client of its own, quick to give up: the rank's own may be waiting on a store that hangs.
    StoreClient probe(env_.store_host, env_.store_port, env_.token, kVerdictStoreTimeout, kVerdictStoreTimeout);
    const auto read = [&] {
      std::vector<std::optional<Heartbeat>> beats;
      for (const std::optional<std::string>& text : read_heartbeats(probe, env_.world))
        beats.push_back(text ? decode_heartbeat(*text) : std::nullopt);
      return beats;
    };
    const auto before = read();
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(kVerdictInterval);
    const auto after = read();
    const HangVerdict verdict = judge_hang(*comm_, *mine, before, after,
                                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    silent_ranks_ = verdict.silent;
    return verdict.text;
  } catch (const DistError& e) {
    if (env_.rank == 0) return {};  // its own store: nothing to say of another rank
    store_silent_ = true;
    return std::string("rank 0, which hosts the job's store, does not answer (") + e.what() +
           "): stopped by a signal or hung, it is the rank the others waited for";
  }
}

void Session::report_abort(const std::string& what) {
  // A second caller waits for the first report to end, then has nothing to add.
  std::call_once(abort_reported_, [&] {
    stop_watch_ = true;  // this rank is the one reporting: its own watchdog must not answer
    if (store_silent_) return;  // a store that does not answer would keep this rank waiting
    if (watchdog_.joinable()) watchdog_.join();
    try {
      post_abort(*store_.client, "rank " + std::to_string(env_.rank) + ": " + what);
    } catch (const DistError&) {
      return;  // the store is gone already: the others notice that themselves
    }
    wait_for_readers(*store_.client);
  });
}

void Session::wait_for_readers(StoreClient& client) const {
  // Ranks that stopped beating (dead, stopped) will not read it: no waiting for them.
  if (store_.server) wait_for_abort_readers(client, env_.world - 1 - silent_ranks_);
}

void Session::finish() {
  stop_watch_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  comm_->barrier(comm_->world_group());
}

}  // namespace ptrain::dist
