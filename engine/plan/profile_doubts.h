// What `ptrain profile` cannot trust in what it just measured (issue 44 item 2): a busy machine once
// gave a quick profile attention at 16.1 ms for sequence 64 and 12.0 ms for 512 (27 us at 64 on a
// quiet one) and a calibration of x0.69, and the demo's prediction from it came out 0.30x. The
// checks, each on what the physics of the op guarantees rather than on a machine's speed:
//   monotone   more work never runs much faster: along each of a GEMM table's m, n and k, over an
//              attention table's sequence lengths, over a memory-bound family's or a collective's
//              bytes, a time below the one before it / kMonotoneSlack is noise (GELU's table is the
//              difference of two GEMMs, noise at small sizes by construction: not checked). CPU
//              profiles only: on a GPU the libraries pick other algorithms by shape, and the shipped
//              H100 profile has cuBLAS's input gradient 4.8x slower at 64 x 8192 x 4096 than at 256
//              rows, small memory-bound kernels slower than larger ones at launch-bound sizes;
//   spread     a point whose repeats disagree: `spread` holds, per table, the worst ratio between
//              a point's slower and faster repeats (app/profile_runs.h: the second slowest over
//              the second fastest, so one outlier each way is forgiven), beyond kSpreadLimit;
//   calibrated the reference step against the tables' prediction of it outside
//              [1 / kCalibrationLimit, kCalibrationLimit]: one of the two ran under other load.
// `profile` measures a doubted table again, and writes what stays doubtful into the file
// (MeasuredProfile::doubts), which validate repeats as a warning.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/plan/measured_profile.h"

namespace ptrain::plan {

inline constexpr double kMonotoneSlack = 1.3;
inline constexpr double kSpreadLimit = 2.0;
inline constexpr double kCalibrationLimit = 1.25;

struct ProfileDoubt {
  // The table as the profile names it: "gemm/f32", "attention/bf16", a memory family ("norm/f32",
  // "optimizer/f32"), "collectives/all_gather", or "calibration".
  std::string table;
  std::string why;  // with the numbers
  std::string text() const { return table + ": " + why; }
};

// Every doubt about `profile`, at most one per table (its worst case). `spread`: by table name as
// above, absent where not measured.
std::vector<ProfileDoubt> profile_doubts(const MeasuredProfile& profile, const std::map<std::string, double>& spread);

}  // namespace ptrain::plan
