// The update's seconds outside collective calls: on host collectives (Gloo) ZeRO's parameter gathers
// run inside the update, and they are the dp axis's time (the next step's report counts them), so
// the optimizer's time leaves them out rather than counting them twice.
#include "engine/train/step_accounting.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "tests/silent_comm.h"

using namespace ptrain;
using namespace std::chrono_literals;

namespace {

// Rank 0 of two whose all-gathers take 120 ms and move nothing; anything else throws.
class SlowGatherComm final : public dist::Comm {
 public:
  SlowGatherComm() : Comm(0, 2) {}
  const char* backend() const override { return "slow-gather"; }

 protected:
  void connect(const dist::Group&) override {}
  [[noreturn]] static void none() { throw dist::DistError("no other communication expected"); }
  void do_all_gather(const dist::Group&, void*, std::size_t, dist::ElemType, bool) override {
    std::this_thread::sleep_for(120ms);
  }
  void do_all_reduce(const dist::Group&, void*, std::size_t, dist::ElemType, dist::ReduceOp, bool) override {
    none();
  }
  void do_reduce_scatter(const dist::Group&, void*, std::size_t, dist::ElemType, bool) override { none(); }
  void do_all_to_allv(const dist::Group&, const float*, const std::vector<std::size_t>&, float*,
                      const std::vector<std::size_t>&) override {
    none();
  }
  void do_broadcast(const dist::Group&, void*, std::size_t, int) override { none(); }
  void do_send(const dist::Group&, const void*, std::size_t, int, int) override { none(); }
  void do_recv(const dist::Group&, void*, std::size_t, int, int) override { none(); }
  void do_barrier(const dist::Group&) override { none(); }
};

}  // namespace

TEST_CASE("the update's seconds leave out the collectives it waits in") {
  SlowGatherComm comm;
  dist::ParallelGroups groups;
  groups.dp = &comm.new_group("dp", {0, 1});
  train::StepAccounting accounting(comm, groups);
  float chunks[2] = {};
  const double seconds = accounting.seconds_outside_calls([&] {
    std::this_thread::sleep_for(20ms);  // AdamW
    comm.all_gather(*groups.dp, chunks, 1, dist::ElemType::F32);  // ZeRO's gather of the updated shards
  });
  CHECK(seconds >= 0.015);
  CHECK(seconds < 0.1);  // 0.14 s with the gather
}

TEST_CASE("with one rank the update's seconds are its wall time") {
  test::SilentComm comm(0, 1);
  const dist::ParallelGroups groups;
  train::StepAccounting accounting(comm, groups);
  const double seconds = accounting.seconds_outside_calls([] { std::this_thread::sleep_for(20ms); });
  CHECK(seconds >= 0.015);
  CHECK(seconds < 1.0);
}
