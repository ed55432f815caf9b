// Shared by the pipeline tests: the sweep of valid (kind, pp, vpp, microbatches) and a compact
// text form of a rank's compute order.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "engine/pipeline/buffers.h"
#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline::testing {

struct Case {
  config::ScheduleKind kind;
  int pp, vpp, microbatches;
  int max_in_flight = 0;  // schedule.max_in_flight; 0: none
};

inline Schedule build(const Case& c) {
  return pipeline::build(c.kind, c.pp, c.vpp, c.microbatches, c.max_in_flight);
}

// The chunk slots the most any rank's executor allocates (rank_buffers): under a cap the slots its
// chunks share, else each chunk's own peak, summed.
inline int slots_allocated(const Schedule& s) {
  int most = 0;
  for (const RankBuffers& held : rank_buffers(s))
    most = std::max(most, held.shared_slots > 0 ? held.shared_slots
                                                : std::accumulate(held.activation_slots.begin(),
                                                                  held.activation_slots.end(), 0));
  return most;
}

// The most chunks of activations any rank's list holds at once (F to B).
inline int peak_chunks(const Schedule& s) {
  int peak = 0;
  for (const auto& list : s.ranks) {
    int held = 0;
    for (const Instr& in : list) {
      if (in.op == Op::Forward) peak = std::max(peak, ++held);
      if (in.op == Op::Backward) --held;
    }
  }
  return peak;
}

inline constexpr config::ScheduleKind kAllKinds[] = {
    config::ScheduleKind::Gpipe, config::ScheduleKind::OneFOneB, config::ScheduleKind::Interleaved1F1B,
    config::ScheduleKind::ZbH1, config::ScheduleKind::Zbv, config::ScheduleKind::DualPipeV};

// The fewest model chunks per rank a kind runs with.
inline int least_vpp(config::ScheduleKind kind) {
  return kind == config::ScheduleKind::Interleaved1F1B || config::StagePlacement::of(kind, 2, 2).v_shape ? 2 : 1;
}

// Every valid combination of pp 1..8, vpp 1..4 (interleaved), 2 (zbv, dualpipev) or 1,
// microbatches 1..24.
inline std::vector<Case> sweep(int max_pp = 8, int max_microbatches = 24) {
  std::vector<Case> cases;
  for (auto kind : kAllKinds) {
    const bool interleaved = kind == config::ScheduleKind::Interleaved1F1B;
    for (int pp = 1; pp <= max_pp; ++pp) {
      for (int vpp = least_vpp(kind); vpp <= (interleaved ? 4 : least_vpp(kind)); ++vpp) {
        for (int m = 1; m <= max_microbatches; ++m) {
          if (build_problems(kind, pp, vpp, m).empty()) cases.push_back({kind, pp, vpp, m});
        }
      }
    }
  }
  return cases;
}

// 1f1b and interleaved-1f1b (vpp 2..max_vpp) under every cap that binds: from the least
// (config::least_in_flight) up to one below what the uncapped order allocates; pp 2..max_pp,
// microbatches pp..3pp (interleaved: multiples of pp).
inline std::vector<Case> capped_sweep(int max_pp = 6, int max_vpp = 3) {
  std::vector<Case> cases;
  for (int pp = 2; pp <= max_pp; ++pp) {
    for (int vpp = 1; vpp <= max_vpp; ++vpp) {
      const auto kind = vpp == 1 ? config::ScheduleKind::OneFOneB : config::ScheduleKind::Interleaved1F1B;
      for (int m = pp; m <= 3 * pp; m += vpp == 1 ? 1 : pp) {
        const int uncapped = slots_allocated(pipeline::build(kind, pp, vpp, m));
        for (int cap = config::least_in_flight(pp, vpp); cap * vpp < uncapped; ++cap)
          cases.push_back({kind, pp, vpp, m, cap});
      }
    }
  }
  return cases;
}

// sweep() and capped_sweep() together.
inline std::vector<Case> sweep_with_caps(int max_pp, int max_microbatches) {
  std::vector<Case> cases = sweep(max_pp, max_microbatches);
  for (const Case& c : capped_sweep(std::min(max_pp, 6))) cases.push_back(c);
  return cases;
}

// "F0 F1 B0 W0 ..." (chunks as "F0.1" when vpp > 1); sends and receives left out.
inline std::string compute_order(const std::vector<Instr>& list, int vpp = 1) {
  std::string out;
  for (const Instr& instr : list) {
    if (!is_compute(instr.op)) continue;
    if (!out.empty()) out += ' ';
    out += std::string(to_string(instr.op)) + std::to_string(instr.microbatch);
    if (vpp > 1) out += "." + std::to_string(instr.chunk);
  }
  return out;
}

inline std::string describe(const Case& c) {
  return std::string(config::to_string(c.kind)) + " pp=" + std::to_string(c.pp) + " vpp=" + std::to_string(c.vpp) +
         " m=" + std::to_string(c.microbatches) +
         (c.max_in_flight > 0 ? " max_in_flight=" + std::to_string(c.max_in_flight) : std::string());
}

}  // namespace ptrain::pipeline::testing
