// The last part of `ptrain profile`: the engine trains a reference job for a few steps on this
// machine, in this process, and the profile keeps how its measured step compares with the step the
// fresh tables predict op by op (plan::Calibration). The reference is a small Llama on CPU and a
// GPT-2 124M step on CUDA.
#pragma once

#include "engine/plan/measured_profile.h"
#include "kernels/ops.h"

namespace ptrain::app {

// `profile` holds every table but the calibration. Throws std::runtime_error if the reference job
// does not run.
plan::Calibration calibrate(const kernels::Ops& ops, const plan::MeasuredProfile& profile, bool quick);

}  // namespace ptrain::app
