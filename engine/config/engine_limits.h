// What `ptrain run` cannot execute yet in a job that the config rules accept (validate and plan
// model every layout): the trainer refuses such a job with the first limit (exit 2), and validate
// lists them all as warnings, so "valid" never hides a job that `run` would refuse. Beside the
// rules, so that plan (below train) asks it too: plan/fp8_refusal.h, where the search tries fp8.
// Pure but for one switch of the GPU session (fp8_on_cuda_unchecked).
#pragma once

#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::config {

struct EngineLimit {
  std::string key;      // the YAML key that asks for it
  std::string message;  // what is not executed
  std::string fix;
};

// The same on both backends, but the ones that name the backend.
std::vector<EngineLimit> engine_limits(const JobSpec& spec);

// PTRAIN_DEBUG_FP8_CUDA=unchecked lifts the one limit that waits for a GPU: train.precision: fp8 on
// the CUDA backend, whose kernels are compiled but have not yet passed their checks on a GPU. Set by
// scripts/device_session.sh once `cuda_op_tests "[fp8]"` has passed on that machine with that build,
// so that the one session a GPU is lent for can also train in FP8 and time it (docs/fp8.md).
// fp8_on_cuda_unchecked: whether `spec` asks for FP8 on CUDA and the variable lifts the limit (then
// `ptrain run` warns).
inline constexpr const char* kFp8CudaUncheckedVariable = "PTRAIN_DEBUG_FP8_CUDA";
bool fp8_on_cuda_unchecked(const JobSpec& spec);

}  // namespace ptrain::config
