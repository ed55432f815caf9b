// Test support: real ranks in one process. Each rank is a thread with its own store client and Gloo
// Comm over TCP on localhost.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/gloo_comm.h"
#include "engine/rendezvous/store.h"

namespace ptrain::test {

// Runs body(comm) on `world` ranks. An exception inside a rank fails the test once all ranks end,
// with the rank's message.
inline void run_gloo_ranks(int world, const std::function<void(dist::Comm&)>& body,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  dist::StoreServer server("127.0.0.1", 0, "test-token");
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::StoreClient client("127.0.0.1", server.port(), "test-token", std::chrono::seconds(10));
        auto comm = dist::make_gloo_comm(client, r, world, {"127.0.0.1", timeout});
        body(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);  // shown with a failure
    CHECK(errors[static_cast<std::size_t>(r)].empty());
  }
}

}  // namespace ptrain::test
