#include "engine/comm/session.h"

#include <cstdio>
#include <cstdlib>

#include "engine/comm/gloo_comm.h"
#include "engine/log/log.h"

namespace ptrain::dist {
namespace {

constexpr auto kWatchPeriod = std::chrono::milliseconds(200);

}  // namespace

std::unique_ptr<Session> rendezvous(const WorkerEnv& env, const std::string& job_identity,
                                    std::chrono::milliseconds timeout, const NcclOffer& offer) {
  std::unique_ptr<Session> s(new Session());
  s->env_ = env;
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
    options.on_failure = [session = s.get()](const std::string& what, const std::string& log) {
      ::ptrain::log::comm().error("{}\nlast collectives of this rank:\n{}", what, log);
      session->report_abort(what);
      std::_Exit(1);  // a runtime failure
    };
    s->comm_ = offer.nccl->make_comm(*s->store_.client, env.rank, env.world, options);
  } else {
    if (env.rank == 0 && !offer.gpu.empty())
      log::comm().info("collectives go through Gloo with host staging: {}", backend);
    GlooOptions options{local_address_towards(env.store_host, env.store_port), timeout};
    s->comm_ = make_gloo_comm(*s->store_.client, env.rank, env.world, options);
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
      const std::optional<std::string> posted = read_abort(*store_.watch_client);
      if (!posted) continue;
      reason = *posted;
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
    log::comm().error("rank {} stops{}: {}\nrank {}'s last collectives:\n{}", env_.rank, culprit, reason, env_.rank,
                      comm_->log().dump());
    wait_for_readers(*store_.watch_client);
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
      post_abort(*store_.client, "rank " + std::to_string(env_.rank) + ": " + what);
    } catch (const DistError&) {
      return;  // the store is gone already: the others notice that themselves
    }
    wait_for_readers(*store_.client);
  });
}

void Session::wait_for_readers(StoreClient& client) const {
  if (store_.server) wait_for_abort_readers(client, env_.world);
}

void Session::finish() {
  stop_watch_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  comm_->barrier(comm_->world_group());
}

}  // namespace ptrain::dist
