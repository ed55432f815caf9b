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
class SlowGatherComm final : public test::SilentComm {
 public:
  SlowGatherComm() : SilentComm(0, 2) {}

 protected:
  void do_all_gather(const dist::Group&, void*, std::size_t, dist::ElemType, bool) override {
    std::this_thread::sleep_for(120ms);
  }
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
