#include "app/profile_collectives.h"

#include <algorithm>
#include <chrono>
#include <memory>
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

// The slowest rank's seconds for one run of `op`, median of `repeats`.
template <typename Op>
double slowest(dist::Comm& comm, int repeats, Op&& op) {
  const dist::Group& world = comm.world_group();
  std::vector<double> runs;
  op();  // warm-up: connections, buffers
  for (int i = 0; i < repeats; ++i) {
    comm.barrier(world);
    const auto start = std::chrono::steady_clock::now();
    op();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comm.all_reduce(world, &seconds, 1, dist::ReduceOp::Max);
    runs.push_back(seconds);
  }
  std::nth_element(runs.begin(), runs.begin() + repeats / 2, runs.end());
  return std::max(runs[static_cast<std::size_t>(repeats / 2)], 1e-9);
}

}  // namespace

plan::CollectiveTable measure_collectives(dist::Comm& comm, const kernels::Ops& ops, bool quick) {
  const dist::Group& world = comm.world_group();
  const int n = comm.world(), me = comm.rank();
  const int repeats = quick ? 3 : 5;
  plan::CollectiveTable table;
  table.ranks = n;
  table.transport = comm.backend();
  // Buffer sizes S in bytes (a multiple of 4n so every chunk is whole floats).
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 4096; bytes <= (quick ? std::size_t{16} << 20 : std::size_t{256} << 20); bytes *= quick ? 16 : 8)
    sizes.push_back(bytes / (4 * static_cast<std::size_t>(n)) * 4 * static_cast<std::size_t>(n));
  for (const std::size_t bytes : sizes) {
    const std::size_t count = bytes / 4, chunk = count / static_cast<std::size_t>(n);
    Floats a(comm, ops, count), b(comm, ops, count);
    auto add = [&](CollectiveKind kind, double seconds) {
      table.points[plan::collective_name(kind)].emplace_back(static_cast<double>(bytes), seconds);
    };
    add(CollectiveKind::AllReduce, slowest(comm, repeats, [&] { comm.all_reduce(world, a.data(), count); }));
    add(CollectiveKind::ReduceScatter, slowest(comm, repeats, [&] { comm.reduce_scatter(world, a.data(), chunk); }));
    add(CollectiveKind::AllGather, slowest(comm, repeats, [&] { comm.all_gather(world, a.data(), chunk); }));
    add(CollectiveKind::AllToAll, slowest(comm, repeats, [&] { comm.all_to_all(world, a.data(), b.data(), chunk); }));
    // A message of S bytes between neighbours: even ranks send, odd ones receive (ranks paired).
    add(CollectiveKind::SendRecv, slowest(comm, repeats, [&] {
          if (me % 2 == 0 && me + 1 < n) comm.send(world, a.data(), bytes, me + 1);
          if (me % 2 == 1) comm.recv(world, a.data(), bytes, me - 1);
        }));
  }
  return table;
}

}  // namespace ptrain::app
