// What `ptrain profile` measures: the engine's own kernels (kernels::Ops) on the grids of a
// plan::MeasuredProfile, each timed as the best of a few runs after a warm-up, synchronised by
// reading one value back.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "engine/plan/measured_profile.h"
#include "kernels/ops.h"

namespace ptrain::app {

struct ProfileOptions {
  bool quick = false;  // coarser grids, fewer repeats: under a minute on a CPU
  std::function<void(const std::string&)> progress;  // one line per table
  // The tables to measure, by the names plan/profile_doubts.h gives them ("gemm/f32",
  // "attention/bf16", "norm/f32", "optimizer/f32", ...); every one when empty.
  std::set<std::string> only;
  // Whether this backend runs FP8 GEMMs (the CPU's emulation; a GPU of compute capability 8.9+):
  // then the gemm/fp8 table too.
  bool fp8 = false;
};

struct MeasuredTables {
  plan::MeasuredProfile profile;
  // Per table, the worst disagreement between a point's repeats: its second slowest over its second
  // fastest, over points of at least kSpreadFloorS (below, the clock's and the cache's jitter).
  std::map<std::string, double> spread;
};
inline constexpr double kSpreadFloorS = 20e-6;

// GEMM, attention and memory-bound tables for f32 and bf16, and with options.fp8 the FP8 GEMM table
// (device, versions and date are the caller's to fill).
MeasuredTables measure_profile(const kernels::Ops& ops, const ProfileOptions& options);

// The test seam of the profile's checks (plan/profile_doubts.h): PTRAIN_DEBUG_PROFILE_NOISE=TABLE
// (a table name as above, "attention/f32") multiplies the first point of that table by 1000 each
// time it is measured, as a burst of other load would, so that profile doubts it, measures it again
// and writes the doubt. Unset: "". Returns false, after logging why, for a value naming no table.
bool profile_noise_table(std::string& table);

}  // namespace ptrain::app
