// What `ptrain profile --nproc N` measures on every worker: the collectives the engine issues,
// through its own communicator (Gloo on CPU ranks, NCCL when every rank has a GPU), over the world
// group at a few buffer sizes. Each call is timed between two barriers, as the slowest rank saw it,
// in rounds over the whole grid; the table keeps each point's mean without its largest run.
#pragma once

#include "engine/comm/comm.h"
#include "engine/plan/measured_profile.h"
#include "kernels/ops.h"

namespace ptrain::app {

// Every rank calls it; all get the same table. `ops` provides device memory when the
// communicator takes it (NCCL).
plan::CollectiveTable measure_collectives(dist::Comm& comm, const kernels::Ops& ops, bool quick);

}  // namespace ptrain::app
