// The checker proves every built schedule deadlock-free, and catches broken ones.
#include "engine/pipeline/checker.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "engine/pipeline/simulator.h"
#include "tests/pipeline/schedule_cases.h"

using ptrain::config::ScheduleKind;
using namespace ptrain::pipeline;

namespace {

bool any_contains(const std::vector<std::string>& messages, const std::string& needle) {
  for (const auto& m : messages) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& messages) {
  std::string out;
  for (const auto& m : messages) out += m + "\n";
  return out;
}

size_t index_of(const std::vector<Instr>& list, const Instr& instr) {
  const auto it = std::find(list.begin(), list.end(), instr);
  REQUIRE(it != list.end());
  return static_cast<size_t>(it - list.begin());
}

}  // namespace

TEST_CASE("every built schedule passes the checker (pp 1..8, vpp 1..4, m 1..24, and every binding cap)") {
  const auto cases = ptrain::pipeline::testing::sweep_with_caps(8, 24);
  CHECK(cases.size() > 1000);
  for (const auto& c : cases) {
    INFO(ptrain::pipeline::testing::describe(c));
    const auto problems = check(ptrain::pipeline::testing::build(c));
    INFO(joined(problems));
    CHECK(problems.empty());
  }
}

TEST_CASE("larger schedules pass too") {
  CHECK(check(build(ScheduleKind::OneFOneB, 16, 1, 256)).empty());
  CHECK(check(build(ScheduleKind::Interleaved1F1B, 16, 4, 64)).empty());
  CHECK(check(build(ScheduleKind::ZbH1, 12, 1, 100)).empty());
  CHECK(check(build(ScheduleKind::Gpipe, 8, 1, 100)).empty());
  CHECK(check(build(ScheduleKind::Interleaved1F1B, 16, 2, 32, 19)).empty());  // configs/published 8K job's
}

TEST_CASE("a swap that makes two ranks wait on each other is a deadlock") {
  // GPipe, pp=2, m=2. Rank 0: F0 SendAct0 F1 SendAct1 RecvGrad0 B0 RecvGrad1 B1. Swapping
  // SendAct1 and RecvGrad0 makes rank 0 wait for grad 0 before sending act 1, while rank 1 runs
  // both forwards before its first backward: each waits on the other.
  Schedule s = build(ScheduleKind::Gpipe, 2, 1, 2);
  auto& list = s.ranks[0];
  std::swap(list[index_of(list, {Op::SendAct, 1, 0, 1})], list[index_of(list, {Op::RecvGrad, 0, 0, 1})]);
  const auto problems = check(s);
  INFO(joined(problems));
  REQUIRE(problems.size() == 2);
  CHECK(any_contains(problems,
                     "deadlock: rank 0, instruction 3 (RecvGrad(mb 0, chunk 0) from rank 1) waits forever: "
                     "rank 1 is itself blocked at instruction 2 (RecvAct(mb 1, chunk 0) from rank 0)"));
  CHECK(any_contains(problems,
                     "deadlock: rank 1, instruction 2 (RecvAct(mb 1, chunk 0) from rank 0) waits forever"));
}

TEST_CASE("a 1f1b rank that runs a backward before its warmup forwards deadlocks") {
  Schedule s = build(ScheduleKind::OneFOneB, 4, 1, 8);
  auto& list = s.ranks[0];  // F0 SA0 F1 SA1 F2 SA2 F3 SA3 RG0 B0 ...
  const size_t recv_grad = index_of(list, {Op::RecvGrad, 0, 0, 1});
  std::rotate(list.begin() + 4, list.begin() + recv_grad, list.begin() + recv_grad + 2);  // RG0 B0 after F1
  const auto problems = check(s);
  INFO(joined(problems));
  CHECK(any_contains(problems, "deadlock: rank 0, instruction 4 (RecvGrad(mb 0, chunk 0) from rank 1)"));
}

TEST_CASE("a dropped receive is reported") {
  Schedule s = build(ScheduleKind::OneFOneB, 4, 1, 8);
  auto& list = s.ranks[2];
  list.erase(list.begin() + index_of(list, {Op::RecvAct, 5, 0, 1}));
  const auto problems = check(s);
  INFO(joined(problems));
  CHECK(any_contains(problems, "rank 2: RecvAct(mb 5, chunk 0) from rank 1 is missing"));
  CHECK(any_contains(problems, "channel rank 1 -> rank 2 (activations): 8 sends but 7 receives"));
}

TEST_CASE("a duplicated forward is reported") {
  Schedule s = build(ScheduleKind::ZbH1, 3, 1, 6);
  auto& list = s.ranks[1];
  list.insert(list.begin() + index_of(list, {Op::Forward, 2, 0, -1}), Instr{Op::Forward, 2, 0, -1});
  const auto problems = check(s);
  INFO(joined(problems));
  CHECK(any_contains(problems, "rank 1: F(mb 2, chunk 0) appears more than once"));
}

TEST_CASE("both ends of a channel must agree on the order") {
  // Rank 1 of gpipe pp=2 m=2 starts RecvAct0 F0 RecvAct1 F1: receive microbatch 1 first instead.
  Schedule s = build(ScheduleKind::Gpipe, 2, 1, 2);
  auto& list = s.ranks[1];
  std::swap_ranges(list.begin(), list.begin() + 2, list.begin() + 2);
  REQUIRE(list[0] == Instr{Op::RecvAct, 1, 0, 0});
  const auto problems = check(s);
  INFO(joined(problems));
  REQUIRE(problems.size() == 1);
  CHECK(any_contains(problems,
                     "channel rank 0 -> rank 1 (activations): message 0 is sent by rank 0, instruction 1 "
                     "(SendAct(mb 0, chunk 0) to rank 1) but received by rank 1, instruction 0 "
                     "(RecvAct(mb 1, chunk 0) from rank 0)"));
}

TEST_CASE("local order, fields and shape are checked") {
  SECTION("backward before its forward") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
    auto& list = s.ranks[1];  // last stage: RecvAct0 F0 B0 SendGrad0 ...
    std::swap(list[1], list[2]);
    CHECK(any_contains(check(s),
                       "rank 1, instruction 1 (B(mb 0, chunk 0)) comes before F of the same microbatch"));
  }
  SECTION("wrong peer") {
    Schedule s = build(ScheduleKind::OneFOneB, 4, 1, 4);
    s.ranks[1][2].peer = 3;  // RecvAct0 F0 SendAct0: send to rank 3
    CHECK(any_contains(check(s), "the next virtual stage is on rank 2"));
  }
  SECTION("W in a schedule that fuses it") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
    s.ranks[0].push_back({Op::WeightGrad, 0, 0});
    CHECK(any_contains(check(s), "runs the weight grad inside B"));
  }
  SECTION("a send off the end of the pipeline") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
    s.ranks[1].push_back({Op::SendAct, 0, 0, 0});
    CHECK(any_contains(check(s), "the last virtual stage has no SendAct"));
  }
  SECTION("a message for the V's turn, which stays on the rank") {
    Schedule s = build(ScheduleKind::Zbv, 2, 2, 2);
    s.ranks[1].push_back({Op::SendAct, 0, 0, 0});  // rank 1 = pp-1: chunk 0 feeds its own chunk 1
    CHECK(any_contains(check(s), "the next virtual stage is on this rank, a hop without a message"));
  }
  SECTION("the later chunk's F before the earlier one's across the V's turn") {
    Schedule s = build(ScheduleKind::Zbv, 2, 2, 2);
    auto& list = s.ranks[1];  // RecvAct(0, 0) F(0, 0) F(0, 1) SendAct(0, 1) ...
    REQUIRE(list[1] == Instr{Op::Forward, 0, 0});
    REQUIRE(list[2] == Instr{Op::Forward, 0, 1});
    std::swap(list[1], list[2]);
    std::swap(list[0], list[1]);  // F(0, 1) RecvAct(0, 0) F(0, 0): the receive still right before its F
    CHECK(any_contains(check(s), "rank 1, instruction 0 (F(mb 0, chunk 1)) comes before F(mb 0, chunk 0) at "
                                 "instruction 2, which hands it its input on this rank"));
  }
  SECTION("microbatch out of range") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
    s.ranks[0][0].microbatch = 7;
    CHECK(any_contains(check(s), "microbatch out of range [0, 2)"));
  }
  SECTION("one list per rank") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
    s.ranks.pop_back();
    CHECK(any_contains(check(s), "malformed schedule"));
  }
}

TEST_CASE("random adjacent swaps: whatever the checker accepts runs to the end") {
  std::mt19937 rng(1234);
  int accepted = 0, rejected = 0;
  for (auto kind : ptrain::pipeline::testing::kAllKinds) {
    const bool interleaved = kind == ScheduleKind::Interleaved1F1B;
    const Schedule original = build(kind, 4, interleaved ? 2 : 1, 8);
    for (int trial = 0; trial < 300; ++trial) {
      Schedule s = original;
      for (int swaps = 0; swaps < 3; ++swaps) {
        auto& list = s.ranks[rng() % s.ranks.size()];
        const size_t i = rng() % (list.size() - 1);
        std::swap(list[i], list[i + 1]);
      }
      if (!check(s).empty()) {
        ++rejected;
        continue;
      }
      ++accepted;
      const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 2, 1));
      size_t executed = 0;
      for (const auto& spans : sim.timeline) executed += spans.size();
      CHECK(executed == static_cast<size_t>(s.compute_ops()));
    }
  }
  CHECK(accepted > 30);  // e.g. two sends swapped, or a send moved past an unrelated compute op
  CHECK(rejected > 300);
}

TEST_CASE("F&B pairs: only on an F, with a B next, and deadlock-free run as one step") {
  SECTION("dualpipev's pairs pass") {
    for (int pp : {2, 3, 5}) CHECK(check(build(ScheduleKind::DualPipeV, pp, 2, 2 * pp + 1)).empty());
  }
  SECTION("the mark on a B") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
    s.ranks[1][index_of(s.ranks[1], {Op::Backward, 0, 0})].overlapped = true;
    CHECK(any_contains(check(s), "B(mb 0, chunk 0) opening an F&B pair): only an F opens an F&B pair"));
  }
  SECTION("an F whose next compute op is not a B") {
    Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);  // rank 0: F0 SendAct0 F1 SendAct1 RecvGrad0 B0 ...
    s.ranks[0][index_of(s.ranks[0], {Op::Forward, 0, 0})].overlapped = true;
    CHECK(any_contains(check(s), "rank 0, instruction 0 (F(mb 0, chunk 0) opening an F&B pair): the rank's next "
                                 "compute op is F(mb 1, chunk 0), not a B to pair with"));
  }
  SECTION("a pair waiting for the grad of its own forward") {
    // Fine run as listed; as one step F0&B0 would need B0's grad before F0's output leaves.
    Schedule s{ScheduleKind::OneFOneB, 2, 1, 1, false, {}};
    s.ranks = {{{Op::Forward, 0, 0, -1, true}, {Op::SendAct, 0, 0, 1}, {Op::RecvGrad, 0, 0, 1}, {Op::Backward, 0, 0}},
               {{Op::RecvAct, 0, 0, 0}, {Op::Forward, 0, 0}, {Op::Backward, 0, 0}, {Op::SendGrad, 0, 0, 0}}};
    const auto problems = check(s);
    INFO(joined(problems));
    CHECK(any_contains(problems,
                       "deadlock: rank 0, instruction 2 (RecvGrad(mb 0, chunk 0) from rank 1) waits forever (an F&B "
                       "pair receives all its inputs before it starts): rank 1 is itself blocked at instruction 0 "
                       "(RecvAct(mb 0, chunk 0) from rank 0)"));
    s.ranks[0][0].overlapped = false;
    CHECK(check(s).empty());
  }
}
