#include "app/profile_collectives.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/runtime/owned_buffer.h"

namespace ptrain::app {
namespace {

using model::CollectiveKind;

// Float buffers the communicator can use: host memory for Gloo, the backend's for NCCL.
class Floats {
 public:
  Floats(const dist::Comm& comm, const kernels::Ops& ops, std::size_t count) {
    if (comm.takes_device_memory()) {
      device_ = runtime::OwnedBuffer(ops, static_cast<std::int64_t>(count), kernels::DType::F32);
      data_ = static_cast<float*>(device_.data());
    } else {
      host_.assign(count, 1.0f);
      data_ = host_.data();
    }
  }
  float* data() const { return data_; }

 private:
  std::vector<float> host_;
  runtime::OwnedBuffer device_;
  float* data_ = nullptr;
};

// Work on this thread for `seconds`, as a step computes before it calls a collective.
void compute_for(double seconds) {
  static std::vector<float> scratch(1 << 18, 1.0f);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until)
    for (float& x : scratch) x = x * 0.999f + 0.5f;
}

// The slowest rank's seconds for one run of `op`: every rank leaves a barrier, computes for
// `lead_in` seconds and calls it. On a host whose ranks share its cores, a call made straight after
// compute costs what a step's calls cost, several times one made from idle: the transport's
// threads then wake on cores still busy (measured on a 2-core VM: a 64 KiB all-gather 0.1 ms idle,
// about 1 ms after 1 ms of compute).
template <typename Op>
double slowest(dist::Comm& comm, double lead_in, Op&& op) {
  const dist::Group& world = comm.world_group();
  comm.barrier(world);
  if (lead_in > 0) compute_for(lead_in);
  const auto start = std::chrono::steady_clock::now();
  op();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm.all_reduce(world, &seconds, 1, dist::ReduceOp::Max);
  return seconds;
}

// The mean of `runs` without its largest (a first touch, a stray page fault).
double trimmed_mean(std::vector<double> runs) {
  std::sort(runs.begin(), runs.end());
  runs.pop_back();
  double sum = 0;
  for (const double r : runs) sum += r;
  return std::max(sum / static_cast<double>(runs.size()), 1e-9);
}

}  // namespace

plan::CollectiveTable measure_collectives(dist::Comm& comm, const kernels::Ops& ops, bool quick) {
  const dist::Group& world = comm.world_group();
  const int n = comm.world(), me = comm.rank();
  // 60 rounds, quick or not: on a 2-core host a call's wake-up latency (~1 ms, doubling in slow
  // spells) is most of a small message's time, and 20 rounds left tp's predicted step +-9% from one
  // profile to the next (llama tp 2 with SP, 4 profiles), 80 rounds about +-4%.
  const int rounds = 60;
  // Host transports are timed after compute, as a step calls them; device ones (NCCL) queue behind
  // the stream's kernels and are timed from idle.
  const double lead_in = comm.takes_device_memory() ? 0.0 : 0.002;
  plan::CollectiveTable table;
  table.ranks = n;
  table.transport = comm.backend();
  // Buffer sizes S in bytes (a multiple of 4n so every chunk is whole floats).
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 4096; bytes <= (quick ? std::size_t{16} << 20 : std::size_t{256} << 20); bytes *= quick ? 16 : 8)
    sizes.push_back(bytes / (4 * static_cast<std::size_t>(n)) * 4 * static_cast<std::size_t>(n));
  const std::size_t largest = sizes.back() / 4;
  Floats a(comm, ops, largest), b(comm, ops, largest);
  const CollectiveKind kinds[] = {CollectiveKind::AllReduce, CollectiveKind::ReduceScatter, CollectiveKind::AllGather,
                                  CollectiveKind::AllToAll, CollectiveKind::SendRecv};
  auto run = [&](CollectiveKind kind, std::size_t bytes) {
    const std::size_t count = bytes / 4, chunk = count / static_cast<std::size_t>(n);
    return slowest(comm, lead_in, [&] {
      switch (kind) {
        case CollectiveKind::AllReduce: comm.all_reduce(world, a.data(), count); break;
        case CollectiveKind::ReduceScatter: comm.reduce_scatter(world, a.data(), chunk); break;
        case CollectiveKind::AllGather: comm.all_gather(world, a.data(), chunk); break;
        case CollectiveKind::AllToAll: comm.all_to_all(world, a.data(), b.data(), chunk); break;
        case CollectiveKind::SendRecv:  // S bytes between neighbours: even ranks send, odd ones receive
          if (me % 2 == 0 && me + 1 < n) comm.send(world, a.data(), bytes, me + 1);
          if (me % 2 == 1) comm.recv(world, a.data(), bytes, me - 1);
          break;
      }
    });
  };
  // Rounds over the whole grid rather than repeats of one point: a host's slow spells (a few ms
  // of wake-up latency that last tens of calls) then fall on every point alike, as they fall on a
  // step's calls, and the mean is what a step's many calls add up to.
  std::map<std::pair<CollectiveKind, std::size_t>, std::vector<double>> runs;
  for (const CollectiveKind kind : kinds) run(kind, sizes.back());  // warm-up: connections, buffers
  for (int round = 0; round < rounds; ++round)
    for (const std::size_t bytes : sizes)
      for (const CollectiveKind kind : kinds) runs[{kind, bytes}].push_back(run(kind, bytes));
  for (const CollectiveKind kind : kinds)
    for (const std::size_t bytes : sizes)
      table.points[plan::collective_name(kind)].emplace_back(static_cast<double>(bytes),
                                                             trimmed_mean(runs[{kind, bytes}]));
  return table;
}

}  // namespace ptrain::app
