#include "engine/train/axis_accounting.h"

#include <optional>
#include <string>

#include "engine/plan/traffic.h"

namespace ptrain::train {
namespace {

// `of(group)` summed over each axis's groups (a group this rank does not have is nullptr).
template <typename Of>
PerAxis by_axis(const dist::ParallelGroups& g, Of of) {
  auto at = [&](const dist::Group* group) { return group == nullptr ? 0.0 : of(*group); };
  return {at(g.tp) + at(g.kv_copies), at(g.pp) + at(g.embedding), at(g.dp) + at(g.expert_dp), at(g.cp), at(g.ep)};
}

}  // namespace

PerAxis bytes_sent(const dist::Comm& comm, const dist::ParallelGroups& groups) {
  return by_axis(groups, [&](const dist::Group& g) {
    double sum = 0;
    for (const auto& [op, t] : comm.traffic(g)) {
      std::optional<plan::CollectiveKind> kind;
      if (op == "all_reduce") kind = plan::CollectiveKind::AllReduce;
      if (op == "all_gather") kind = plan::CollectiveKind::AllGather;
      if (op == "reduce_scatter") kind = plan::CollectiveKind::ReduceScatter;
      if (op == "send" || op == "isend") kind = plan::CollectiveKind::SendRecv;
      if (op == "all_to_allv") kind = plan::CollectiveKind::AllToAll;
      if (kind) sum += plan::bytes_sent(plan::Collective{*kind, t.bytes, g.size()});
    }
    return sum;
  });
}

PerAxis seconds_in_calls(const dist::Comm& comm, const dist::ParallelGroups& groups) {
  return by_axis(groups, [&](const dist::Group& g) {
    double sum = 0;
    for (const auto& [op, t] : comm.traffic(g)) sum += t.seconds;
    return sum;
  });
}

PerAxis device_waits(const std::vector<dist::Comm::DeviceWait>& waits, std::uint64_t from,
                     const dist::ParallelGroups& groups) {
  return by_axis(groups, [&](const dist::Group& g) {
    double sum = 0;
    for (const dist::Comm::DeviceWait& w : waits)
      if (w.seq >= from && w.group == g.id) sum += w.seconds;
    return sum;
  });
}

}  // namespace ptrain::train
