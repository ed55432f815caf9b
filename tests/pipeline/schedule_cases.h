// Shared by the pipeline tests: the sweep of valid (kind, pp, vpp, microbatches) and a compact
// text form of a rank's compute order.
#pragma once

#include <string>
#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline::testing {

struct Case {
  config::ScheduleKind kind;
  int pp, vpp, microbatches;
};

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
  return std::string(config::to_string(c.kind)) + " pp=" + std::to_string(c.pp) +
         " vpp=" + std::to_string(c.vpp) + " m=" + std::to_string(c.microbatches);
}

}  // namespace ptrain::pipeline::testing
