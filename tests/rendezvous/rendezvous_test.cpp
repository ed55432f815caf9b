// How the ranks of a job meet in the rendezvous (ranks as threads; no GPU is needed): they agree
// on their collectives backend (NCCL only when every rank offers a GPU and no two offer the same
// one, decided by rank 0 for all: a job that chooses NCCL here fails to create it, which shows the
// choice), and a process that does not belong to the job whose store it reaches (another token,
// another job, a rank taken already) fails at once naming the store.
#include "engine/comm/session.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace ptrain::dist;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A listening store socket for rank 0 to inherit, and its port.
struct StoreSocket {
  int fd = -1;
  int port = 0;
};

StoreSocket store_socket() {
  StoreSocket s;
  s.fd = StoreServer::listen_socket("127.0.0.1", 0);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  REQUIRE(getsockname(s.fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0);
  s.port = ntohs(bound.sin_port);
  return s;
}

WorkerEnv rank_env(int rank, int world, const StoreSocket& store, const std::string& token = "t") {
  WorkerEnv env;
  env.rank = rank;
  env.world = world;
  env.store_host = "127.0.0.1";
  env.store_port = store.port;
  env.token = token;
  env.store_fd = rank == 0 ? store.fd : -1;
  return env;
}

// Each rank's Comm backend ("gloo") or the error its rendezvous threw.
std::vector<std::string> join(const std::vector<std::string>& gpus) {
  const int world = static_cast<int>(gpus.size());
  const StoreSocket store = store_socket();
  std::vector<std::string> outcome(gpus.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto session =
            rendezvous(rank_env(r, world, store), "job", 30s, {gpus[static_cast<std::size_t>(r)], nullptr});
        outcome[static_cast<std::size_t>(r)] = session->comm().backend();
        session->finish();
      } catch (const std::exception& e) {
        outcome[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcome;
}

// What a rendezvous that must fail threw: "<kind>: <message>", and how long it took.
struct Refusal {
  std::string what;
  double seconds = 0;
};

Refusal refusal(const WorkerEnv& env, const std::string& job) {
  const auto start = Clock::now();
  Refusal r;
  try {
    rendezvous(env, job, 30s);
    r.what = "joined";
  } catch (const LaunchConfigError& e) {
    r.what = std::string("LaunchConfigError: ") + e.what();
  } catch (const DistError& e) {
    r.what = std::string("DistError: ") + e.what();
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// Runs the ranks of a `world`-rank job "job-a" in threads; they keep their sessions until stop().
class Job {
 public:
  Job(const StoreSocket& store, int world, const std::vector<int>& ranks) {
    for (const int r : ranks) start(store, world, r);
  }
  ~Job() { stop(); }
  void start(const StoreSocket& store, int world, int rank) {
    threads_.emplace_back([this, env = rank_env(rank, world, store)] {
      try {
        auto session = rendezvous(env, "job-a", 30s);
        ++joined_;
        while (!stopping_) std::this_thread::sleep_for(10ms);
        const std::string backend = session->comm().backend();
        session->finish();
        report(backend);
      } catch (const std::exception& e) {
        report(std::string("error: ") + e.what());
      }
    });
  }
  bool wait_joined(int n) const {
    for (auto end = Clock::now() + 30s; Clock::now() < end; std::this_thread::sleep_for(10ms))
      if (joined_ == n) return true;
    return false;
  }
  // Ends the job; what each rank reported, in the order they finished.
  std::string stop() {
    stopping_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
    return backends_;
  }

 private:
  void report(const std::string& outcome) {
    std::lock_guard lock(mutex_);
    backends_ += outcome + " ";
  }

  std::vector<std::thread> threads_;
  std::atomic<int> joined_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::string backends_;  // each rank's outcome, in the order they finished
};

}  // namespace

TEST_CASE("the job uses Gloo unless every rank has a GPU of its own") {
  CHECK(join({"", ""}) == std::vector<std::string>{"gloo", "gloo"});
  CHECK(join({"GPU-a", ""}) == std::vector<std::string>{"gloo", "gloo"});
  CHECK(join({"GPU-a", "GPU-b", "GPU-a"}) == std::vector<std::string>{"gloo", "gloo", "gloo"});
}

TEST_CASE("every rank on its own GPU: the whole job chooses NCCL") {
  // No GPU here: rank 0 fails to create its NCCL communicator (or this ptrain has no NCCL). The
  // others fail the same way, or lose the store rank 0 hosted when it gave up first; none uses Gloo.
  const std::vector<std::string> outcome = join({"GPU-a", "GPU-b", "GPU-c"});
  CHECK_THAT(outcome[0], Catch::Contains("NCCL"));
  for (const std::string& o : outcome) CHECK(o != "gloo");
}

TEST_CASE("a process of another job fails at once naming the store, and the job goes on") {
  const StoreSocket store = store_socket();
  const std::string where = "127.0.0.1:" + std::to_string(store.port);
  Job job(store, 2, {0});  // rank 0 only, for now: it waits for its rank 1
  SECTION("another token") {
    const Refusal r = refusal(rank_env(1, 2, store, "other"), "job-a");
    CHECK_THAT(r.what, Catch::StartsWith("DistError") && Catch::Contains(where) &&
                           Catch::Contains("rejected the job token"));
    CHECK(r.seconds < 10);
  }
  SECTION("the same token, another job file or world size") {
    for (int world : {2, 3}) {
      const Refusal r = refusal(rank_env(1, world, store), world == 2 ? "job-b" : "job-a");
      CHECK_THAT(r.what, Catch::StartsWith("LaunchConfigError") && Catch::Contains(where) &&
                             Catch::Contains("belongs to another job") &&
                             Catch::Contains("PTRAIN_JOB_TOKEN"));
      CHECK(r.seconds < 10);
    }
  }
  job.start(store, 2, 1);
  CHECK(job.wait_joined(2));
  CHECK(job.stop() == "gloo gloo ");
}

TEST_CASE("a rank claimed a second time fails at once naming the store") {
  const StoreSocket store = store_socket();
  Job job(store, 2, {0, 1});
  REQUIRE(job.wait_joined(2));
  const Refusal r = refusal(rank_env(1, 2, store), "job-a");
  CHECK_THAT(r.what, Catch::StartsWith("LaunchConfigError") &&
                         Catch::Contains("rank 1 is already taken in the store at 127.0.0.1:" +
                                         std::to_string(store.port)));
  CHECK(r.seconds < 10);
  CHECK(job.stop() == "gloo gloo ");
}
