// Schedule builders: argument problems, the exact compute orders of small cases, and the
// placement of sends and receives over the whole sweep.
#include "engine/pipeline/schedule.h"

#include <tuple>

#include <catch2/catch.hpp>

#include "engine/pipeline/simulator.h"
#include "tests/pipeline/schedule_cases.h"

using ptrain::config::ScheduleKind;
using namespace ptrain::pipeline;
using ptrain::pipeline::testing::compute_order;

namespace {

bool any_contains(const std::vector<std::string>& messages, const std::string& needle) {
  for (const auto& m : messages) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("build_problems names what is wrong") {
  CHECK(build_problems(ScheduleKind::OneFOneB, 4, 1, 8).empty());
  CHECK(any_contains(build_problems(ScheduleKind::OneFOneB, 0, 1, 8), "pp must be at least 1"));
  CHECK(any_contains(build_problems(ScheduleKind::OneFOneB, 4, 0, 8), "virtual_stages must be at least 1"));
  CHECK(any_contains(build_problems(ScheduleKind::Gpipe, 4, 1, 0), "at least 1 microbatch"));
  CHECK(any_contains(build_problems(ScheduleKind::OneFOneB, 4, 1, 3),
                     "1f1b needs at least as many microbatches"));
  CHECK(
      any_contains(build_problems(ScheduleKind::ZbH1, 4, 1, 3), "zb-h1 needs at least as many microbatches"));
  CHECK(build_problems(ScheduleKind::Gpipe, 4, 1, 3).empty());  // gpipe runs any count
  CHECK(any_contains(build_problems(ScheduleKind::OneFOneB, 4, 2, 8), "virtual_stages must be 1"));
  CHECK(any_contains(build_problems(ScheduleKind::Gpipe, 4, 2, 8), "use interleaved-1f1b"));
  CHECK(any_contains(build_problems(ScheduleKind::Interleaved1F1B, 4, 1, 8), "virtual_stages >= 2"));
  CHECK(any_contains(build_problems(ScheduleKind::Interleaved1F1B, 1, 2, 8), "needs pp >= 2"));
  CHECK(any_contains(build_problems(ScheduleKind::Interleaved1F1B, 4, 2, 6), "to be a multiple of pp (4)"));
  CHECK(build_problems(ScheduleKind::Interleaved1F1B, 4, 2, 8).empty());
  CHECK(any_contains(build_problems(ScheduleKind::Gpipe, 4, 1, 8, 2), "caps 1f1b and interleaved-1f1b, not gpipe"));
  CHECK(any_contains(build_problems(ScheduleKind::Interleaved1F1B, 4, 2, 8, 2), "must be at least 3"));
  CHECK(build_problems(ScheduleKind::Interleaved1F1B, 4, 2, 8, 3).empty());
  CHECK(build_problems(ScheduleKind::OneFOneB, 4, 1, 8, 1).empty());
}

TEST_CASE("gpipe: all forwards, then all backwards") {
  const Schedule s = build(ScheduleKind::Gpipe, 2, 1, 3);
  CHECK_FALSE(s.split_weight_grad);
  for (const auto& list : s.ranks) CHECK(compute_order(list) == "F0 F1 F2 B0 B1 B2");
}

TEST_CASE("1f1b: warmup pp-r-1 forwards, steady 1F1B, cooldown") {
  const Schedule s = build(ScheduleKind::OneFOneB, 4, 1, 8);
  REQUIRE(s.ranks.size() == 4);
  CHECK(compute_order(s.ranks[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  CHECK(compute_order(s.ranks[1]) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  CHECK(compute_order(s.ranks[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST_CASE("interleaved-1f1b follows Megatron's virtual-microbatch order") {
  const Schedule s = build(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  // Rank 0: warmup (2-0-1)*2 + (2-1)*2 = 4 forwards; rank 1: 2.
  CHECK(compute_order(s.ranks[0], 2) ==
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  CHECK(compute_order(s.ranks[1], 2) ==
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
}

TEST_CASE("interleaved-1f1b with m == pp warms up completely on the first rank") {
  const Schedule s = build(ScheduleKind::Interleaved1F1B, 4, 2, 4);
  CHECK(compute_order(s.ranks[0], 2) ==
        "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
}

TEST_CASE("zb-h1: split W, rank 0 runs B W F, the last rank lets W lag") {
  const Schedule s = build(ScheduleKind::ZbH1, 4, 1, 8);
  CHECK(s.split_weight_grad);
  CHECK(compute_order(s.ranks[0]) ==
        "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  CHECK(compute_order(s.ranks[3]) ==
        "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
}

TEST_CASE("pp = 1 has no messages") {
  for (auto kind : {ScheduleKind::Gpipe, ScheduleKind::OneFOneB, ScheduleKind::ZbH1}) {
    const Schedule s = build(kind, 1, 1, 3);
    for (const Instr& instr : s.ranks[0]) CHECK(is_compute(instr.op));
  }
  CHECK(compute_order(build(ScheduleKind::ZbH1, 1, 1, 2).ranks[0]) == "F0 B0 W0 F1 B1 W1");
}

TEST_CASE("sends and receives sit right around their compute op, over the sweep") {
  for (const auto& c : ptrain::pipeline::testing::sweep_with_caps(8, 24)) {
    INFO(ptrain::pipeline::testing::describe(c));
    const Schedule s = ptrain::pipeline::testing::build(c);
    REQUIRE(static_cast<int>(s.ranks.size()) == c.pp);
    int compute = 0;
    bool placed = true;
    const ptrain::config::StagePlacement place = s.placement();
    for (int rank = 0; rank < s.pp; ++rank) {
      const auto& list = s.ranks[rank];
      for (size_t i = 0; i < list.size(); ++i) {
        const Instr& in = list[i];
        if (!is_compute(in.op)) continue;
        ++compute;
        // No message at either end of the pipeline, nor for a hop within the rank.
        const int stage = s.virtual_stage(rank, in.chunk);
        const int prev = stage == 0 ? rank : place.holder(stage - 1).rank;
        const int next = stage == s.virtual_stages() - 1 ? rank : place.holder(stage + 1).rank;
        const bool first = prev == rank, last = next == rank;
        auto before = [&](Op op, int peer) {
          return i > 0 && list[i - 1] == Instr{op, in.microbatch, in.chunk, peer};
        };
        auto after = [&](Op op, int peer) {
          return i + 1 < list.size() && list[i + 1] == Instr{op, in.microbatch, in.chunk, peer};
        };
        if (in.op == Op::Forward) {
          placed &= first || before(Op::RecvAct, prev);
          placed &= last || after(Op::SendAct, next);
        } else if (in.op == Op::Backward) {
          placed &= last || before(Op::RecvGrad, next);
          placed &= first || after(Op::SendGrad, prev);
        }
      }
    }
    CHECK(placed);
    CHECK(compute == s.compute_ops());
  }
}

TEST_CASE("channels lists each message channel once, in an order every rank derives alike") {
  const std::vector<Channel> straight = {{0, 1, true},  {1, 0, false}, {1, 2, true},
                                         {2, 1, false}, {2, 3, true},  {3, 2, false}};
  CHECK(channels(build(ScheduleKind::OneFOneB, 4, 1, 8)) == straight);
  CHECK(channels(build(ScheduleKind::ZbH1, 4, 1, 8)) == straight);
  // Interleaved: the last rank's chunk feeds the first rank's next chunk, so messages go around.
  const std::vector<Channel> ring = {{0, 1, true}, {0, 1, false}, {1, 0, true}, {1, 0, false}};
  CHECK(channels(build(ScheduleKind::Interleaved1F1B, 2, 2, 4)) == ring);
  CHECK(channels(build(ScheduleKind::Interleaved1F1B, 3, 2, 6)).size() == 6);
  CHECK(channels(build(ScheduleKind::Gpipe, 1, 1, 4)).empty());
}

TEST_CASE("dualpipev marks its F&B pairs: the steady F0&B1 and F1&B0, then F1&B0") {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {2 * pp, 2 * pp + 5}) {
      const Schedule s = build(ScheduleKind::DualPipeV, pp, 2, m);
      for (int rank = 0; rank < pp; ++rank) {
        INFO("pp=" << pp << " m=" << m << " rank=" << rank);
        const auto& list = s.ranks[rank];
        int pairs = 0;
        for (size_t i = 0; i < list.size(); ++i) {
          if (!list[i].overlapped) continue;
          ++pairs;
          REQUIRE(list[i].op == Op::Forward);
          size_t b = i + 1;
          while (!is_compute(list[b].op)) ++b;
          CHECK(list[b].op == Op::Backward);
          CHECK(list[b].chunk == 1 - list[i].chunk);  // the forward of one chunk, the backward of the other
          // The whole backward: its W follows at once (after the B's SendGrad if there is one).
          const size_t w = b + 1 + (b + 1 < list.size() && list[b + 1].op == Op::SendGrad ? 1 : 0);
          CHECK(list[w] == Instr{Op::WeightGrad, list[b].microbatch, list[b].chunk});
        }
        // 2 per steady step but the last rank's first (the reference runs those apart), 1 per step of phase 5.
        CHECK(pairs == 2 * (m - 2 * pp + rank + 1) + (pp - rank - 1) - (rank == pp - 1 ? 1 : 0));
      }
    }
  }
  for (auto kind : {ScheduleKind::OneFOneB, ScheduleKind::ZbH1, ScheduleKind::Zbv}) {
    const Schedule s = build(kind, 4, kind == ScheduleKind::Zbv ? 2 : 1, 8);
    for (const auto& list : s.ranks)
      for (const Instr& in : list) CHECK_FALSE(in.overlapped);
  }
}

TEST_CASE("max_in_flight: each rank keeps its forwards' and backwards' order and holds at most the cap") {
  using ptrain::pipeline::testing::capped_sweep;
  const auto cases = capped_sweep();
  CHECK(cases.size() > 100);
  for (const auto& c : cases) {
    INFO(ptrain::pipeline::testing::describe(c));
    const Schedule capped = ptrain::pipeline::testing::build(c);
    const Schedule uncapped = build(c.kind, c.pp, c.vpp, c.microbatches);
    CHECK(capped.max_in_flight == c.max_in_flight);
    for (int rank = 0; rank < c.pp; ++rank) {
      auto only = [&](const Schedule& s, Op op) {
        std::vector<Instr> kept;
        for (const Instr& in : s.ranks[rank])
          if (in.op == op) kept.push_back(in);
        return kept;
      };
      CHECK(only(capped, Op::Forward) == only(uncapped, Op::Forward));
      CHECK(only(capped, Op::Backward) == only(uncapped, Op::Backward));
      int held = 0, most = 0;
      for (const Instr& in : capped.ranks[rank]) {
        if (in.op == Op::Forward) most = std::max(most, ++held);
        if (in.op == Op::Backward) --held;
      }
      CHECK(most <= c.max_in_flight * c.vpp);
    }
  }
}

TEST_CASE("max_in_flight at or above what the order allocates leaves the kind's own order") {
  for (const auto& [kind, pp, vpp, m, cap] : {std::tuple{ScheduleKind::OneFOneB, 4, 1, 8, 4},
                                              std::tuple{ScheduleKind::OneFOneB, 4, 1, 8, 9},
                                              std::tuple{ScheduleKind::Interleaved1F1B, 4, 2, 8, 6},
                                              std::tuple{ScheduleKind::Interleaved1F1B, 16, 2, 32, 24},
                                              // no overflow past int: a cap of every microbatch
                                              std::tuple{ScheduleKind::Interleaved1F1B, 4, 4, 8, 2147483647}}) {
    INFO(pp << " " << vpp << " " << m << " " << cap);
    const Schedule s = build(kind, pp, vpp, m, cap);
    CHECK(s.ranks == build(kind, pp, vpp, m).ranks);
    CHECK(s.max_in_flight == 0);
  }
}

TEST_CASE("max_in_flight trades memory for bubble: Llama 3's 8K-GPU pipeline at 19 of 24") {
  // pp 16, vpp 2, 32 microbatches (configs/published/llama3-405b-8192-gpus.yaml): uncapped, rank 0
  // warms up with 46 chunk forwards; at most 19 microbatches (38 chunks) in flight cost, at F = 1,
  // B = 2 per chunk, under 6% more step (the same warm-up cut short in Megatron's order costs
  // more than 60%: a rank's "F, then B" waits on a B that cannot have come yet).
  const Schedule uncapped = build(ScheduleKind::Interleaved1F1B, 16, 2, 32);
  const Schedule capped = build(ScheduleKind::Interleaved1F1B, 16, 2, 32, 19);
  CHECK(ptrain::pipeline::testing::peak_chunks(uncapped) == 47);
  CHECK(ptrain::pipeline::testing::peak_chunks(capped) == 38);
  const double base = simulate(uncapped, OpCosts::uniform(uncapped, 1, 2, 0)).makespan;
  const double with_cap = simulate(capped, OpCosts::uniform(capped, 1, 2, 0)).makespan;
  CHECK(with_cap > base);
  CHECK(with_cap < 1.06 * base);
}
