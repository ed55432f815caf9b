#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/runtime/ordered_worker.h"

using ptrain::runtime::OrderedWorker;

TEST_CASE("an ordered worker runs its tasks in order while the caller waits for a prefix", "[ordered_worker]") {
  OrderedWorker worker;
  std::vector<int> order;
  std::atomic<bool> release{false};
  worker.start(4, [&](int i) {
    if (i == 2)
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    order.push_back(i);
  });
  worker.wait(1);  // tasks 0 and 1 done; 2 holds
  CHECK(worker.done(1));
  CHECK_FALSE(worker.done(2));
  CHECK_FALSE(worker.done(-1));  // below 0: the whole batch
  release = true;
  worker.wait_all();
  CHECK(order == std::vector<int>{0, 1, 2, 3});
  CHECK(worker.done(99));
  // The next batch starts after this one; past its end, wait means all of it.
  worker.start(2, [&](int i) { order.push_back(10 + i); });
  worker.wait(7);
  CHECK(order == std::vector<int>{0, 1, 2, 3, 10, 11});
}

TEST_CASE("an ordered worker with no batch never blocks", "[ordered_worker]") {
  OrderedWorker worker;
  worker.wait(3);
  worker.wait_all();
  CHECK(worker.done(0));
  worker.start(0, [](int) {});
  worker.wait_all();
}

TEST_CASE("a task's failure ends the batch and reaches whoever waits", "[ordered_worker]") {
  OrderedWorker worker;
  std::vector<int> ran;
  worker.start(5, [&](int i) {
    if (i == 1) throw std::runtime_error("host update failed");
    ran.push_back(i);
  });
  CHECK_THROWS_WITH(worker.wait(4), "host update failed");
  CHECK(worker.done(4));
  CHECK(ran == std::vector<int>{0});
  CHECK_THROWS_WITH(worker.start(1, [](int) {}), "host update failed");  // still the old batch's
}
