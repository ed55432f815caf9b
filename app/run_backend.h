// Where `ptrain run` computes: the job's backend (cpu, cuda, or auto: CUDA when this ptrain has it
// and a device is visible, else the CPU), decided the same way by a rank before it starts and by
// the local launcher before it spawns any, so that a job no rank could run starts no worker.
#pragma once

#include <optional>
#include <string>

#include "engine/config/job_spec.h"
#include "kernels/cuda_backend.h"
#include "kernels/ops.h"

namespace ptrain::app {

struct RunBackend {
  const kernels::CudaBackend* cuda = nullptr;  // nullptr: the CPU
  int devices = 0;                             // CUDA devices visible, which the local ranks take in turn
};

// nullopt with `why_not` filled when the job asks for what cannot run here.
std::optional<RunBackend> resolve_backend(const config::JobSpec& spec, std::string& why_not);

// The ops a rank computes with: the CPU's, or CUDA's with device `local_rank` mod the visible ones
// made current. nullptr with `why_not` filled as resolve_backend fills it.
const kernels::Ops* select_backend(const config::JobSpec& spec, int local_rank, std::string& why_not);

}  // namespace ptrain::app
