// A profile measured on one GPU, read for another. `ptrain profile` can only measure the machine it
// runs on, yet a user plans jobs for GPUs they do not have at hand (and the published A100 runs in
// configs/published were measured on GPUs this project never had). Where the job's cluster.gpu is
// not the GPU its cluster.profile measured, the profile's tables are carried across by the
// datasheet ratios of hardware.h: GEMM and attention times by the ratio of the dense peaks of their
// element type, memory-bound times (norms, activations, the optimizer...) by the ratio of the HBM
// bandwidths. What carries: how far below its peaks the engine's kernels run at each shape, which
// is the profile's real content. What does not: the measured collectives (the link model of the
// other GPU prices them instead), launch latencies (scaled like the rest, so small ops on a slower
// GPU come out too slow) and a generation's own kernel efficiency (an A100 reaches a larger
// fraction of its peak than an H100 on the same GEMM). How far that holds: bench/README.md.
#pragma once

#include "engine/plan/hardware.h"
#include "engine/plan/measured_profile.h"

namespace ptrain::plan {

// The hardware entry a profile measured: "cpu" for the CPU backend; for CUDA, the one its device
// name names (H100, H200, A100); nullptr where it names none (such a profile is read as measured).
const HardwareProfile* measured_hardware(const MeasuredProfile& profile);

// `profile`, measured on `from`, timed as `to` would run it; both must be GPUs
// (std::invalid_argument otherwise). The result records the transfer (MeasuredProfile::transfer),
// keeps the calibration, and has neither collectives nor accuracy: neither was measured on `to`.
MeasuredProfile transfer_profile(const MeasuredProfile& profile, const HardwareProfile& from,
                                 const HardwareProfile& to);

}  // namespace ptrain::plan
