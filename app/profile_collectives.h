// What `ptrain profile --nproc N` measures on every worker: the collectives the engine issues,
// through its own communicator (Gloo on CPU ranks, NCCL when every rank has a GPU), over the world
// group at a few buffer sizes. Each size is timed a few times, each time between two barriers, as
// the slowest rank saw it; the table keeps the median.
#pragma once

#include "engine/dist/comm.h"
#include "engine/plan/measured_profile.h"
#include "kernels/ops.h"

namespace ptrain::app {

// Every rank calls it; all get the same table. `ops` provides device memory when the
// communicator takes it (NCCL).
plan::CollectiveTable measure_collectives(dist::Comm& comm, const kernels::Ops& ops, bool quick);

}  // namespace ptrain::app
