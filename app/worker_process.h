// What a worker process of `run` and `profile` needs about itself.
#pragma once

#include <optional>
#include <string>

#include "engine/comm/session.h"
#include "engine/launch/worker_env.h"
#include "kernels/ops.h"

namespace ptrain::app {

// This binary's path (/proc/self/exe), to start workers running the same command.
std::string self_executable();

// Whether a launcher (ptrain's own, mpirun, srun, torchrun-style variables) started this process
// as a worker, into `env`; false after printing why the environment is unusable (exit 2).
bool detect_worker(std::optional<dist::WorkerEnv>& env);

// What this rank offers the rendezvous for NCCL: its GPU, when it computes on one and the CUDA
// module has NCCL (the job then uses NCCL if every rank has a GPU of its own; see dist::rendezvous).
dist::NcclOffer nccl_offer(const kernels::Ops& ops);

}  // namespace ptrain::app
