// The profile validate, plan and schedule time a GPU job with when its cluster.profile names none:
// profiles/h100-sxm.json, compiled into the binary (the measured H100 profile, checked against runs
// on the H100: its `accuracy`), carried to the job's GPU when that is another (profile_transfer.h).
// A fixed fraction of peak, which this replaces as the default, was measured 1.15-1.83x optimistic
// on the same H100 runs; `cluster.profile: peak` still asks for it. CPU jobs have no built-in
// profile: a CPU's is one machine's (its cores, its memory, its load), so they stay at peak x 60%
// unless given one.
#pragma once

#include <memory>

#include "engine/plan/hardware.h"
#include "engine/plan/measured_profile.h"

namespace ptrain::plan {

// The built-in profile for jobs on `gpu` (read once per process), nullptr for the CPU.
// std::invalid_argument (from_json's, or naming the device) if the compiled-in file does not load
// or measured no GPU with a datasheet entry: a build defect, which callers report without failing
// the command (validate and plan then time at peak x 60%).
std::shared_ptr<const MeasuredProfile> builtin_profile(const HardwareProfile& gpu);

// The cluster.profile value that asks for peak x 60% instead of the built-in profile.
inline constexpr const char* kPeakModel = "peak";

}  // namespace ptrain::plan
