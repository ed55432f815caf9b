// ScheduleModel against the full schedule: for every kind, the numbers it derives from short samples
// (simulation, what each rank holds, counts over the lists) equal those of building and simulating
// all the microbatches, to rounding, for several microbatch counts past where it starts sampling,
// under costs whose steady state takes several microbatches to repeat (the layered ones), or is
// reached only past the first sample (some of the random ones: sampled again, further on).
#include "engine/pipeline/schedule_model.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "tests/pipeline/schedule_cases.h"

namespace ptrain::pipeline {
namespace {

using Catch::Detail::Approx;
using config::ScheduleKind;
using testing::Case;
using testing::describe;

constexpr double kRounding = 1e-9;

// Costs per virtual stage: every stage alike; the embedding and the head on the first and last
// with a layer less, every third stage a layer more (cycles of several microbatches in the steady
// state); or drawn at random.
enum class Costs { Uniform, Layered, Random };

OpCosts costs_of(const Case& c, Costs kind, double p2p, std::mt19937& rng) {
  const int stages = c.pp * c.vpp;
  std::uniform_real_distribution<double> draw(0.5, 2.0);
  OpCosts costs;
  for (int v = 0; v < stages; ++v) {
    double layers = 4;
    if (kind == Costs::Layered) layers = (v == 0 || v == stages - 1 ? 3.2 : 4) + (v % 3 == 1 ? 1 : 0);
    const double f = kind == Costs::Random ? draw(rng) : layers;
    costs.forward.push_back(f);
    costs.backward.push_back(kind == Costs::Random ? 2 * draw(rng) : 2 * f);
    costs.weight_grad.push_back(kind == Costs::Random ? draw(rng) : f);
  }
  costs.p2p_seconds = p2p;
  return costs;
}

void check_against_full(const Case& c, const OpCosts& costs, const ScheduleModel& model) {
  INFO(describe(c) << " p2p " << costs.p2p_seconds << (costs.forward_backward.empty() ? "" : " F&B one op"));
  REQUIRE(model.sampled());
  REQUIRE(model.microbatches() == c.microbatches);
  const Schedule full = build(c.kind, c.pp, c.vpp, c.microbatches, c.max_in_flight);
  const SimResult want = simulate(full, costs, Timeline::Drop), got = model.simulate(costs);
  CHECK(got.makespan == Approx(want.makespan).epsilon(kRounding));
  CHECK(got.bubble.fraction == Approx(want.bubble.fraction).epsilon(kRounding).margin(kRounding));
  CHECK(got.bubble.seconds == Approx(want.bubble.seconds).epsilon(kRounding).margin(kRounding));
  for (int r = 0; r < c.pp; ++r) {
    CHECK(got.busy[r] == Approx(want.busy[r]).epsilon(kRounding));
    CHECK(got.peak_inflight[r] == want.peak_inflight[r]);
    CHECK(got.peak_live[r] == want.peak_live[r]);
  }
  CHECK(model.max_in_flight() == full.max_in_flight);
  const std::vector<RankBuffers> held = rank_buffers(full);
  for (int r = 0; r < c.pp; ++r) {
    CHECK(model.held()[r].activation_slots == held[r].activation_slots);
    CHECK(model.held()[r].shared_slots == held[r].shared_slots);
    CHECK(model.held()[r].send_buffers == held[r].send_buffers);
  }
  // A replay through a state the blocks set: how often a rank's compute switches chunk or direction.
  auto switches = [](const Schedule& s) {
    ScheduleModel::Counts out;
    for (const std::vector<Instr>& list : s.ranks) {
      std::int64_t n = 0;
      const Instr* last = nullptr;
      for (const Instr& in : list) {
        if (!is_compute(in.op)) continue;
        if (last != nullptr && (last->op != in.op || last->chunk != in.chunk)) ++n;
        last = &in;
      }
      out.push_back(n);
    }
    return out;
  };
  CHECK(model.count(switches) == switches(full));
}

void check_against_full(const Case& c, const OpCosts& costs) {
  check_against_full(c, costs, ScheduleModel(c.kind, c.pp, c.vpp, c.microbatches, c.max_in_flight));
}

// Every kind at pp 3 and 8 (and interleaved at 2 and 4 chunks, both capped where a cap binds), at
// three microbatch counts past where sampling starts.
std::vector<Case> long_cases() {
  std::vector<Case> cases;
  for (const int pp : {3, 8}) {
    const int least_interleaved = config::least_in_flight(pp, 2);
    const std::vector<Case> kinds = {{ScheduleKind::Gpipe, pp, 1, 0},
                                     {ScheduleKind::OneFOneB, pp, 1, 0},
                                     {ScheduleKind::OneFOneB, pp, 1, 0, pp - 1},
                                     {ScheduleKind::Interleaved1F1B, pp, 2, 0},
                                     {ScheduleKind::Interleaved1F1B, pp, 4, 0},
                                     {ScheduleKind::Interleaved1F1B, pp, 2, 0, least_interleaved},
                                     {ScheduleKind::ZbH1, pp, 1, 0},
                                     {ScheduleKind::Zbv, pp, 2, 0},
                                     {ScheduleKind::DualPipeV, pp, 2, 0}};
    for (Case c : kinds) {
      const int first = 8192 / (pp * c.vpp) + 1;  // past the chunks ScheduleModel builds in full
      for (const int m : {first, first + 5, 2 * first + 3}) {
        c.microbatches = c.kind == ScheduleKind::Interleaved1F1B ? (m + pp - 1) / pp * pp : m;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

TEST_CASE("the model's numbers are the full schedule's, for every kind, past where it samples") {
  std::mt19937 rng(45);
  for (const Case& c : long_cases()) {
    for (const Costs kind : {Costs::Uniform, Costs::Layered, Costs::Random}) {
      for (const double p2p : {0.0, 0.3}) {
        OpCosts costs = costs_of(c, kind, p2p, rng);
        check_against_full(c, costs);
        if (c.kind == ScheduleKind::DualPipeV) {  // its F&B pairs timed as one op too
          for (std::size_t v = 0; v < costs.forward.size(); ++v)
            costs.forward_backward.push_back(0.8 * (costs.forward[v] + costs.backward[v] + costs.weight_grad[v]));
          check_against_full(c, costs);
        }
      }
    }
  }
}

TEST_CASE("a model over other microbatch counts: its samples serve them too") {
  std::mt19937 rng(7);
  for (const Case& first : {Case{ScheduleKind::OneFOneB, 8, 1, 1100}, Case{ScheduleKind::Interleaved1F1B, 8, 2, 520},
                            Case{ScheduleKind::OneFOneB, 8, 1, 1100, 5}, Case{ScheduleKind::Gpipe, 8, 1, 1100}}) {
    const ScheduleModel model(first.kind, first.pp, first.vpp, first.microbatches, first.max_in_flight);
    for (const int more : {first.pp * 5, first.pp * 40}) {
      Case c = first;
      c.microbatches += more;
      check_against_full(c, costs_of(c, Costs::Layered, 0.2, rng), model.over(c.microbatches));
    }
  }
  // Too few to sample: built in full.
  CHECK_FALSE(ScheduleModel(ScheduleKind::OneFOneB, 8, 1, 1100).over(64).sampled());
}

TEST_CASE("short schedules are built in full, as before") {
  CHECK_FALSE(ScheduleModel(ScheduleKind::OneFOneB, 8, 1, 64).sampled());
  CHECK_FALSE(ScheduleModel(ScheduleKind::Interleaved1F1B, 16, 2, 16).sampled());
  CHECK(ScheduleModel(ScheduleKind::OneFOneB, 64, 1, 16384).sampled());
}

}  // namespace
}  // namespace ptrain::pipeline
