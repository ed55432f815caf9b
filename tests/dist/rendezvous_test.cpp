// How the ranks of a job agree on their collectives backend in the rendezvous: NCCL only when
// every rank offers a GPU and no two offer the same one, decided by rank 0 for all (ranks as
// threads; no GPU is needed: a job that chooses NCCL here fails to create it, which shows the
// choice).
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/dist/rendezvous.h"

namespace {

using namespace ptrain::dist;
using namespace std::chrono_literals;

// Each rank's Comm backend ("gloo") or the error its rendezvous threw.
std::vector<std::string> join(const std::vector<std::string>& gpus) {
  const int world = static_cast<int>(gpus.size());
  const int fd = StoreServer::listen_socket("127.0.0.1", 0);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0);
  std::vector<std::string> outcome(gpus.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      WorkerEnv env;
      env.rank = r;
      env.world = world;
      env.store_host = "127.0.0.1";
      env.store_port = ntohs(bound.sin_port);
      env.token = "t";
      env.store_fd = r == 0 ? fd : -1;
      try {
        auto session = rendezvous(env, 30s, {gpus[static_cast<std::size_t>(r)], nullptr});
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
