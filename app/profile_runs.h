// What `ptrain profile` measures: the engine's own kernels (kernels::Ops) on the grids of a
// plan::MeasuredProfile, each timed as the best of a few runs after a warm-up, synchronised by
// reading one value back.
#pragma once

#include <functional>
#include <string>

#include "engine/plan/measured_profile.h"
#include "kernels/ops.h"

namespace ptrain::app {

struct ProfileOptions {
  bool quick = false;  // coarser grids, fewer repeats: under a minute on a CPU
  std::function<void(const std::string&)> progress;  // one line per table
};

// GEMM, attention and memory-bound tables for f32 and bf16 (device, versions and date are the
// caller's to fill).
plan::MeasuredProfile measure_profile(const kernels::Ops& ops, const ProfileOptions& options);

}  // namespace ptrain::app
