// What this rank's collectives and messages cost, by axis of the rank grid: each axis's groups
// (tp with the KV-head copies' groups, pp with the tied embedding's, dp with the experts' dp
// groups, cp, ep) summed into the PerAxis the metrics report and validate predicts.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/comm/parallel_groups.h"
#include "engine/train/metrics.h"

namespace ptrain::train {

// The bytes this rank has sent on each axis since the Comm began, by the plan's convention
// (plan::bytes_sent); receives count nothing (their senders count them).
PerAxis bytes_sent(const dist::Comm& comm, const dist::ParallelGroups& groups);

// The seconds this rank has spent inside each axis's calls since the Comm began (the host's clock).
PerAxis seconds_in_calls(const dist::Comm& comm, const dist::ParallelGroups& groups);

// The compute stream's waits (Comm::settle_device_waits) recorded from `from` on, by axis.
PerAxis device_waits(const std::vector<dist::Comm::DeviceWait>& waits, std::uint64_t from,
                     const dist::ParallelGroups& groups);

}  // namespace ptrain::train
