// The simulator against the published bubbles and memory bounds, and an independent check that
// every simulated op starts only after its inputs exist.
#include "engine/pipeline/simulator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <tuple>

#include "tests/pipeline/schedule_cases.h"

using Catch::Detail::Approx;
using ptrain::config::ScheduleKind;
using namespace ptrain::pipeline;
using ptrain::pipeline::testing::describe;
using ptrain::pipeline::testing::sweep;

namespace {

constexpr double kTight = 1e-9;

std::vector<ptrain::pipeline::testing::Case> cases_of(ScheduleKind kind) {
  std::vector<ptrain::pipeline::testing::Case> out;
  for (const auto& c : sweep()) {
    if (c.kind == kind) out.push_back(c);
  }
  return out;
}

double bubble_seconds(const SimResult& sim, int rank) {
  return sim.makespan - sim.busy[rank];
}

// Every op starts after what it consumes was produced (plus latency), ops on a rank never
// overlap, and every (op, mb, chunk) ran exactly once: checked from the spans alone.
std::string dependency_violation(const Schedule& s, const SimResult& sim, double p2p) {
  std::map<std::tuple<int, int, int>, Span> by_key;  // (op, mb, virtual stage)
  for (int rank = 0; rank < s.pp; ++rank) {
    double previous_end = 0;
    for (const Span& span : sim.timeline[rank]) {
      if (span.start < previous_end - kTight) return "overlapping ops on rank " + std::to_string(rank);
      previous_end = span.end;
      const auto key =
          std::make_tuple(static_cast<int>(span.op), span.microbatch, s.virtual_stage(rank, span.chunk));
      if (!by_key.emplace(key, span).second) return "an op ran twice";
    }
  }
  if (static_cast<int>(by_key.size()) != s.compute_ops()) return "not every op ran";
  const int last = s.virtual_stages() - 1;
  const ptrain::config::StagePlacement place = s.placement();
  for (const auto& [key, span] : by_key) {
    const auto [op, mb, stage] = key;
    auto end_of = [&](Op o, int v) { return by_key.at({static_cast<int>(o), mb, v}).end; };
    // A message between stages on two ranks; none within one rank (the V's turn).
    auto hop = [&](int v) { return place.holder(v).rank == place.holder(stage).rank ? 0.0 : p2p; };
    double ready = 0;
    if (op == static_cast<int>(Op::Forward) && stage > 0) ready = end_of(Op::Forward, stage - 1) + hop(stage - 1);
    if (op == static_cast<int>(Op::Backward)) {
      ready = stage == last ? end_of(Op::Forward, stage) : end_of(Op::Backward, stage + 1) + hop(stage + 1);
    }
    if (op == static_cast<int>(Op::WeightGrad)) ready = end_of(Op::Backward, stage);
    if (span.start < ready - kTight) return "an op starts before its input is ready";
  }
  return "";
}

}  // namespace

TEST_CASE("the bubble is the idle time of the rank computing most, not of the idlest") {
  // pp 2, 2 microbatches, the last stage ten times the first (the head): rank 1 computes F0 1-11,
  // B0 11-31, F1 31-41, B1 41-61; rank 0 F0 0-1, F1 1-2, B0 31-33, B1 61-63. Rank 1, the critical
  // rank, idles 3 of 63; rank 0 idles 57 of them, waiting on rank 1: imbalance, not the schedule's.
  const Schedule s = build(ScheduleKind::OneFOneB, 2, 1, 2);
  OpCosts costs = OpCosts::uniform(s, 1, 2, 0);
  costs.forward[1] = 10, costs.backward[1] = 20;
  const SimResult sim = simulate(s, costs);
  CHECK(sim.makespan == Approx(63).margin(kTight));
  CHECK(sim.bubble.rank == 1);
  CHECK(sim.bubble.seconds == Approx(3).margin(kTight));
  CHECK(sim.bubble.fraction == Approx(3.0 / 63).margin(kTight));
  CHECK(sim.idle_fraction[0] == Approx(57.0 / 63).margin(kTight));
  // measured times take the same definition
  const Bubble measured = bubble_of({6, 60}, 63);
  CHECK((measured.rank == 1 && measured.seconds == 3 && measured.fraction == Approx(3.0 / 63)));
  CHECK(bubble_of({5, 5, 5}, 8).rank == 0);  // the lowest of equals
}

TEST_CASE("1f1b and gpipe: bubble (p-1)/(m+p-1) on every rank with F=1, B=2") {
  for (auto kind : {ScheduleKind::OneFOneB, ScheduleKind::Gpipe}) {
    for (const auto& c : cases_of(kind)) {
      INFO(describe(c));
      const Schedule s = build(c.kind, c.pp, c.vpp, c.microbatches);
      const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 2, 0));
      const double p = c.pp, m = c.microbatches;
      CHECK(sim.makespan == Approx(3 * (m + p - 1)).epsilon(kTight));
      for (int rank = 0; rank < c.pp; ++rank) {
        CHECK(sim.idle_fraction[rank] == Approx((p - 1) / (m + p - 1)).margin(kTight));
      }
    }
  }
}

TEST_CASE("interleaved-1f1b: bubble ((p-1)/v) / (m + (p-1)/v) with F=1/v, B=2/v per chunk") {
  for (const auto& c : cases_of(ScheduleKind::Interleaved1F1B)) {
    INFO(describe(c));
    const Schedule s = build(c.kind, c.pp, c.vpp, c.microbatches);
    const double p = c.pp, m = c.microbatches, v = c.vpp;
    const SimResult sim = simulate(s, OpCosts::uniform(s, 1 / v, 2 / v, 0));
    CHECK(sim.makespan == Approx(3 * (m + (p - 1) / v)).epsilon(kTight));
    for (int rank = 0; rank < c.pp; ++rank) {
      CHECK(sim.idle_fraction[rank] == Approx(((p - 1) / v) / (m + (p - 1) / v)).margin(kTight));
    }
  }
}

TEST_CASE("zb-h1: bubble (p-1)(F+B-W), a third of 1f1b's (p-1)(F+B+W), with F=B=W=1") {
  for (const auto& c : cases_of(ScheduleKind::ZbH1)) {
    INFO(describe(c));
    const Schedule zb = build(c.kind, c.pp, 1, c.microbatches);
    const Schedule one_f_one_b = build(ScheduleKind::OneFOneB, c.pp, 1, c.microbatches);
    const SimResult sim = simulate(zb, OpCosts::uniform(zb, 1, 1, 1));
    const SimResult base = simulate(one_f_one_b, OpCosts::uniform(one_f_one_b, 1, 1, 1));
    const double p = c.pp, m = c.microbatches;
    CHECK(sim.makespan == Approx(3 * m + p - 1).epsilon(kTight));
    for (int rank = 0; rank < c.pp; ++rank) {
      CHECK(bubble_seconds(sim, rank) == Approx((p - 1) * (1 + 1 - 1)).margin(kTight));
      CHECK(bubble_seconds(base, rank) == Approx((p - 1) * (1 + 1 + 1)).margin(kTight));
    }
  }
}

TEST_CASE("zb-h1 beats 1f1b with uneven F, B and W too") {
  for (int pp : {2, 4, 8}) {
    for (int m : {2 * pp, 4 * pp}) {
      for (const auto& [f, b, w] :
           {std::tuple{1.0, 1.2, 0.8}, std::tuple{1.0, 1.0, 0.5}, std::tuple{1.0, 1.5, 1.5}}) {
        INFO("pp=" << pp << " m=" << m << " F=" << f << " B=" << b << " W=" << w);
        const Schedule zb = build(ScheduleKind::ZbH1, pp, 1, m);
        const Schedule base = build(ScheduleKind::OneFOneB, pp, 1, m);
        const double zb_bubble = simulate(zb, OpCosts::uniform(zb, f, b, w)).makespan - m * (f + b + w);
        const double base_bubble = simulate(base, OpCosts::uniform(base, f, b, w)).makespan - m * (f + b + w);
        CHECK(base_bubble == Approx((pp - 1) * (f + b + w)).margin(kTight));
        CHECK(zb_bubble < 0.75 * base_bubble);
      }
    }
  }
}

TEST_CASE("zbv: with F=B=W=1 per chunk only the ramp is left, in 1F1B's memory") {
  // Sea AI Lab's comparison at T_F = T_B = T_W: ZB-V's bubble rate is 0 (1F1B's (p-1)/m, ZB1P's
  // (p-1)/3m) at 1F1B's activation memory (pp microbatches of a full stage = 2pp chunks). What is
  // left is the ramp: rank pp-1 waits pp-1 forwards of a chunk for its first input, and with
  // m = pp or m >= 2pp no rank waits anywhere else: makespan 6m + pp - 1, the least possible.
  for (const auto& c : cases_of(ScheduleKind::Zbv)) {
    INFO(describe(c));
    const Schedule s = build(c.kind, c.pp, c.vpp, c.microbatches);
    const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 1, 1));
    const double p = c.pp, m = c.microbatches;
    if (c.microbatches == c.pp || c.microbatches >= 2 * c.pp) {
      CHECK(sim.makespan == Approx(6 * m + p - 1).epsilon(kTight));
      for (int rank = 0; rank < c.pp; ++rank) CHECK(bubble_seconds(sim, rank) == Approx(p - 1).margin(kTight));
    }
    // 1F1B with the same chunks (a full stage: F = B = W = 2) leaves (p-1)(F+B+W) = 6(p-1).
    CHECK(sim.makespan - 6 * m < 6 * (p - 1));
    CHECK(sim.peak_live_max == Approx(p));  // in full stages: 2pp chunks until W
  }
}

// DualPipe's README ("Pipeline Bubbles and Memory Usage Comparison", PP = pipeline stages, B the
// whole backward, B+W here, F&B an overlapped forward and backward pair):
//   1F1B       (PP-1)(F+B)            activation PP
//   ZB1P       (PP-1)(F+B-2W)         activation PP
//   DualPipeV  (PP/2-1)(F&B+B-3W)     activation PP+1 (of a chunk; PP/2 devices)
TEST_CASE("the DualPipe README's table with uniform costs, F = B = W = 1") {
  for (int pp : {2, 3, 4, 6, 8}) {
    for (int m : {2 * pp, 2 * pp + 3, 24}) {
      INFO("pp=" << pp << " m=" << m);
      const Schedule one_f_one_b = build(ScheduleKind::OneFOneB, pp, 1, m);
      const SimResult base = simulate(one_f_one_b, OpCosts::uniform(one_f_one_b, 1, 1, 1));
      const Schedule zb1p = build(ScheduleKind::ZbH1, pp, 1, m);
      const SimResult zb = simulate(zb1p, OpCosts::uniform(zb1p, 1, 1, 1));
      const double f = 1, b = 1 + 1, w = 1;  // b: the whole backward
      for (int rank = 0; rank < pp; ++rank) {
        CHECK(bubble_seconds(base, rank) == Approx((pp - 1) * (f + b)).margin(kTight));
        CHECK(bubble_seconds(zb, rank) == Approx((pp - 1) * (f + b - 2 * w)).margin(kTight));
      }
      CHECK(base.peak_inflight_max == pp);
      CHECK(zb.peak_inflight_max == pp);

      // DualPipeV over pp ranks: PP = 2pp stages of a chunk each, run as ptrain's executor runs it
      // (each F&B pair F then B, F's output leaving when F ends).
      const Schedule v = build(ScheduleKind::DualPipeV, pp, 2, m);
      const SimResult dual = simulate(v, OpCosts::uniform(v, 1, 1, 1));
      const int stages = 2 * pp;
      CHECK(dual.peak_inflight_max * 2 == stages + 1);  // chunks between F and B on the fullest rank
      // The published bubble at F&B = F + B (nothing overlapped) is 2(pp-1); run one op at a time
      // the forward's output leaves after F alone, a forward earlier on each of the pp-1 steps of
      // the ramp.
      const double published = (stages / 2 - 1) * ((f + b) + b - 3 * w);
      for (int rank = 0; rank < pp; ++rank) {
        CHECK(bubble_seconds(dual, rank) == Approx((stages / 2 - 1) * f).margin(kTight));
        CHECK(bubble_seconds(dual, rank) <= published + kTight);
      }
    }
  }
}

namespace {

// F&B pairs of a DualPipeV rank: 2 per steady step (phase 4) but the last rank's first, 1 per
// step of phase 5.
int dualpipev_pairs(int pp, int m, int rank) {
  return 2 * (m - 2 * pp + rank + 1) + (pp - rank - 1) - (rank == pp - 1 ? 1 : 0);
}

}  // namespace

TEST_CASE("dualpipev with each F&B pair one op: the published bubble, F = B = W = 1") {
  // The published accounting: a pair is one op of cost F&B (the forward and the whole backward of
  // the other chunk, W included) whose outputs leave when it ends. Its bubble per device,
  // (PP/2-1)(F&B+B-3W) = (pp-1)(F&B-1) here, is that of the ranks with the most pairs (pp-2 and
  // pp-1); a rank with k fewer pairs has the same makespan with k(F+B+W-F&B) more of it idle. That
  // holds from F&B = F+B+W (nothing hidden) down to F&B = 2 = the whole backward alone, the least
  // an F&B can physically take. Below it (F&B = 1.5, a pair shorter than its own backward) the
  // formula would undercut the pipeline's dependencies, and the simulated bubble stays above it.
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m = 2 * pp; m <= 24; ++m) {
      const Schedule s = build(ScheduleKind::DualPipeV, pp, 2, m);
      for (double fb : {3.0, 2.5, 2.25, 2.0, 1.5}) {
        INFO("pp=" << pp << " m=" << m << " F&B=" << fb);
        OpCosts costs = OpCosts::uniform(s, 1, 1, 1);
        costs.forward_backward.assign(static_cast<size_t>(s.virtual_stages()), fb);
        const SimResult sim = simulate(s, costs);
        REQUIRE(sim.pairs_as_one_op);
        const double published = (pp - 1) * (fb + 2 - 3);
        double worst = 0;
        for (int rank = 0; rank < pp; ++rank) {
          CHECK(sim.busy[rank] ==
                Approx(6.0 * m - (3 - fb) * dualpipev_pairs(pp, m, rank)).epsilon(kTight));
          worst = std::max(worst, bubble_seconds(sim, rank));
          if (fb >= 2) {
            const int fewer = dualpipev_pairs(pp, m, pp - 1) - dualpipev_pairs(pp, m, rank);
            CHECK(bubble_seconds(sim, rank) == Approx(published - fewer * (3 - fb)).margin(kTight));
          }
        }
        if (fb >= 2) {
          CHECK(worst == Approx(published).margin(kTight));
        } else {
          CHECK(worst > published + 0.25);
        }
        CHECK(sim.peak_inflight_max * 2 == 2 * pp + 1);  // PP+1 chunks
      }
    }
  }
}

TEST_CASE("an F&B pair one op: it waits for both inputs, its outputs leave when it ends") {
  for (int pp : {2, 3, 4}) {
    const Schedule s = build(ScheduleKind::DualPipeV, pp, 2, 2 * pp + 2);
    for (double p2p : {0.0, 0.3}) {
      INFO("pp=" << pp << " p2p=" << p2p);
      OpCosts costs = OpCosts::uniform(s, 1, 1.2, 0.7, p2p);
      for (int v = 0; v < s.virtual_stages(); ++v) {
        costs.forward[v] = 1.0 + 0.1 * (v % 3);
        costs.forward_backward.push_back(0.8 * (costs.forward[v] + costs.backward[v] + costs.weight_grad[v]));
      }
      const SimResult sim = simulate(s, costs);
      CHECK(dependency_violation(s, sim, p2p) == "");
      // Every op's inputs came from ops that ended, and from a pair only once the whole pair ended.
      std::map<std::tuple<int, int, int>, double> ready;  // (op, mb, stage) -> when its output may leave
      for (int rank = 0; rank < pp; ++rank) {
        const auto& spans = sim.timeline[rank];
        for (size_t i = 0; i < spans.size(); ++i) {
          size_t last = i;
          if (spans[i].overlapped && spans[i].op == Op::Forward)
            while (last + 1 < spans.size() && spans[last + 1].overlapped && spans[last + 1].op != Op::Forward) ++last;
          for (size_t k = i; k <= last; ++k)
            ready[{static_cast<int>(spans[k].op), spans[k].microbatch, s.virtual_stage(rank, spans[k].chunk)}] =
                spans[last].end;
          i = last;
        }
      }
      const ptrain::config::StagePlacement place = s.placement();
      for (int rank = 0; rank < pp; ++rank) {
        for (const Span& span : sim.timeline[rank]) {
          const int stage = s.virtual_stage(rank, span.chunk);
          const int from = span.op == Op::Forward ? stage - 1 : stage + 1;
          if (span.op == Op::WeightGrad || from < 0 || from >= s.virtual_stages()) continue;
          if (place.holder(from).rank == rank) continue;  // the V's turn: no message
          CHECK(span.start >= ready.at({static_cast<int>(span.op), span.microbatch, from}) + p2p - kTight);
        }
      }
    }
  }
}

TEST_CASE("peak in-flight microbatches") {
  SECTION("1f1b: p - r on rank r") {
    for (const auto& c : cases_of(ScheduleKind::OneFOneB)) {
      INFO(describe(c));
      const Schedule s = build(c.kind, c.pp, 1, c.microbatches);
      const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 2, 0));
      for (int rank = 0; rank < c.pp; ++rank) CHECK(sim.peak_inflight[rank] == c.pp - rank);
      CHECK(sim.peak_inflight_max == c.pp);
      CHECK(sim.peak_live == sim.peak_inflight);
    }
  }
  SECTION("gpipe: m everywhere") {
    for (const auto& c : cases_of(ScheduleKind::Gpipe)) {
      const Schedule s = build(c.kind, c.pp, 1, c.microbatches);
      const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 2, 0));
      for (int rank = 0; rank < c.pp; ++rank) CHECK(sim.peak_inflight[rank] == c.microbatches);
    }
  }
  SECTION("zb-h1: at most p - r until B, at most p until W") {
    for (const auto& c : cases_of(ScheduleKind::ZbH1)) {
      INFO(describe(c));
      const Schedule s = build(c.kind, c.pp, 1, c.microbatches);
      const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 1, 1));
      for (int rank = 0; rank < c.pp; ++rank) {
        CHECK(sim.peak_inflight[rank] <= c.pp - rank);
        CHECK(sim.peak_live[rank] <= c.pp);
      }
      CHECK(sim.peak_inflight_max == c.pp);
    }
  }
  SECTION("interleaved: (warmup + 1) chunks on rank r, in units of a full stage") {
    for (const auto& c : cases_of(ScheduleKind::Interleaved1F1B)) {
      INFO(describe(c));
      const Schedule s = build(c.kind, c.pp, c.vpp, c.microbatches);
      const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 2, 0));
      const int total = c.microbatches * c.vpp;
      for (int rank = 0; rank < c.pp; ++rank) {
        const int warmup = std::min((c.pp - rank - 1) * 2 + (c.vpp - 1) * c.pp, total);
        CHECK(sim.peak_inflight[rank] == Approx(static_cast<double>(std::min(warmup + 1, total)) / c.vpp));
      }
    }
  }
}

TEST_CASE("p2p latency") {
  SECTION("one microbatch through two stages crosses two links") {
    const Schedule s = build(ScheduleKind::Gpipe, 2, 1, 1);
    CHECK(simulate(s, OpCosts::uniform(s, 1, 2, 0, 0.25)).makespan == Approx(6.5).epsilon(kTight));
  }
  SECTION("1f1b: at least the fill and drain links, more as the steady state waits on grads") {
    for (int pp : {2, 4, 8}) {
      const int m = 2 * pp;
      const Schedule s = build(ScheduleKind::OneFOneB, pp, 1, m);
      double previous = 0;
      for (double latency : {0.0, 0.1, 0.5}) {
        INFO("pp=" << pp << " latency=" << latency);
        const SimResult sim = simulate(s, OpCosts::uniform(s, 1, 2, 0, latency));
        CHECK(sim.makespan >= 3.0 * (m + pp - 1) + 2 * (pp - 1) * latency - kTight);
        CHECK(sim.makespan >= previous);
        CHECK(dependency_violation(s, sim, latency) == "");
        previous = sim.makespan;
      }
    }
  }
}

TEST_CASE("every simulated op starts after its inputs, over the sweep with uneven costs") {
  for (const auto& c : sweep(6, 12)) {
    INFO(describe(c));
    const Schedule s = build(c.kind, c.pp, c.vpp, c.microbatches);
    OpCosts costs = OpCosts::uniform(s, 1, 2, 1, 0.05);
    for (int v = 0; v < s.virtual_stages(); ++v) {
      costs.forward[v] = 1.0 + 0.1 * (v % 3);  // uneven stages, e.g. the embedding or the head
      costs.backward[v] = 2.0 - 0.2 * (v % 2);
    }
    const SimResult sim = simulate(s, costs);
    CHECK(dependency_violation(s, sim, costs.p2p_seconds) == "");
    double total = 0, busy = 0;
    for (int v = 0; v < s.virtual_stages(); ++v)
      total += costs.forward[v] + costs.backward[v] + costs.weight_grad[v];
    for (double b : sim.busy) busy += b;
    CHECK(busy == Approx(total * c.microbatches).epsilon(kTight));
    for (int rank = 0; rank < s.pp; ++rank) {
      CHECK(sim.idle_fraction[rank] == Approx(1 - sim.busy[rank] / sim.makespan).margin(kTight));
      // the bubble is the busiest rank's idle time: no rank computes more, and it idles the least
      CHECK(sim.busy[sim.bubble.rank] >= sim.busy[rank]);
      CHECK(sim.bubble.fraction <= sim.idle_fraction[rank] + kTight);
    }
    CHECK(sim.bubble.seconds == Approx(bubble_seconds(sim, sim.bubble.rank)).margin(kTight));
    CHECK(sim.bubble.fraction == Approx(sim.bubble.seconds / sim.makespan).margin(kTight));
  }
}

TEST_CASE("without its timeline a simulation has the same numbers, bit for bit") {
  for (const auto& c : sweep(6, 12)) {
    INFO(describe(c));
    const Schedule s = build(c.kind, c.pp, c.vpp, c.microbatches);
    OpCosts costs = OpCosts::uniform(s, 1, 2, 1, 0.05);
    for (int v = 0; v < s.virtual_stages(); ++v) costs.forward[v] = 1.0 + 0.1 * (v % 3);
    for (const bool pairs_as_one_op : {false, true}) {
      if (pairs_as_one_op) costs.forward_backward.assign(static_cast<size_t>(s.virtual_stages()), 3.5);
      const SimResult kept = simulate(s, costs), dropped = simulate(s, costs, Timeline::Drop);
      CHECK(dropped.makespan == kept.makespan);
      CHECK(dropped.busy == kept.busy);
      CHECK(dropped.idle_fraction == kept.idle_fraction);
      CHECK((dropped.bubble.rank == kept.bubble.rank && dropped.bubble.seconds == kept.bubble.seconds));
      CHECK(dropped.peak_inflight == kept.peak_inflight);
      CHECK(dropped.peak_live == kept.peak_live);
      CHECK(dropped.peak_live_max == kept.peak_live_max);
      CHECK(dropped.timeline.size() == static_cast<size_t>(s.pp));
      CHECK(std::all_of(dropped.timeline.begin(), dropped.timeline.end(), [](const auto& l) { return l.empty(); }));
    }
  }
}
