// NcclComm's collectives (nccl_comm_impl.h): each one enqueued on the caller's device memory, or
// staged through the device when the data is in host memory.
#include "engine/comm/nccl_comm_impl.h"

#include "engine/comm/nccl_calls.h"

namespace ptrain::dist {

using namespace nccl;  // nccl_calls.h

namespace {

std::size_t total(const std::vector<std::size_t>& counts) {
  std::size_t sum = 0;
  for (std::size_t c : counts) sum += c;
  return sum;
}

}  // namespace

void NcclComm::do_all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op,
                             bool overlap) {
  const std::size_t bytes = count * elem_size(type);
  run(
      key_of(g), data, {data, bytes, 0, bytes},
      [&](void* buf, ncclComm_t comm, cudaStream_t s) {
        PTRAIN_DIST_CHECK(ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), comm, s));
      },
      nullptr, overlap);
}

// In place, NCCL's convention: rank i's result is chunk i of the buffer it sent.
void NcclComm::do_reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type, bool overlap) {
  const std::size_t bytes = chunk * elem_size(type) * static_cast<std::size_t>(g.size());
  run(
      key_of(g), data, {data, bytes, 0, bytes},
      [&](void* buf, ncclComm_t comm, cudaStream_t s) {
        void* mine = static_cast<char*>(buf) + static_cast<std::size_t>(g.index) * chunk * elem_size(type);
        PTRAIN_DIST_CHECK(ncclReduceScatter(buf, mine, chunk, nccl_type(type), ncclSum, comm, s));
      },
      nullptr, overlap);
}

void NcclComm::do_all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, bool overlap) {
  const std::size_t bytes = chunk * elem_size(type) * static_cast<std::size_t>(g.size());
  run(
      key_of(g), data, {data, bytes, 0, bytes},
      [&](void* buf, ncclComm_t comm, cudaStream_t s) {
        const void* mine =
            static_cast<const char*>(buf) + static_cast<std::size_t>(g.index) * chunk * elem_size(type);
        PTRAIN_DIST_CHECK(ncclAllGather(mine, buf, chunk, nccl_type(type), comm, s));
      },
      nullptr, overlap);
}

// Grouped sends and receives. `in` and `out` must be the same kind of memory (a side with nothing
// to move may be null); staged, they lie one after the other in the scratch.
void NcclComm::do_all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts,
                              float* out, const std::vector<std::size_t>& recv_counts) {
  const std::size_t sent = total(send_counts), received = total(recv_counts);
  const bool in_device = is_device(in), out_device = is_device(out);
  if (in != nullptr && out != nullptr && in_device != out_device)
    throw DistError("all_to_allv: `in` and `out` must both be device memory or both host memory");
  const bool staged = !in_device && !out_device;
  run(
      key_of(g), in_device ? static_cast<const void*>(in) : out,
      {in, sent * sizeof(float), sent * sizeof(float), received * sizeof(float)},
      [&](void* buf, ncclComm_t comm, cudaStream_t s) {
        const float* from = staged ? static_cast<const float*>(buf) : in;
        float* to = staged ? static_cast<float*>(buf) + sent : out;
        PTRAIN_DIST_CHECK(ncclGroupStart());
        for (std::size_t peer = 0; peer < send_counts.size(); ++peer) {
          if (send_counts[peer] > 0)
            PTRAIN_DIST_CHECK(ncclSend(from, send_counts[peer], ncclFloat32, static_cast<int>(peer), comm, s));
          if (recv_counts[peer] > 0)
            PTRAIN_DIST_CHECK(ncclRecv(to, recv_counts[peer], ncclFloat32, static_cast<int>(peer), comm, s));
          from += send_counts[peer];
          to += recv_counts[peer];
        }
        PTRAIN_DIST_CHECK(ncclGroupEnd());
      },
      out);
}

void NcclComm::do_broadcast(const Group& g, void* data, std::size_t bytes, int root) {
  run(key_of(g), data, {data, bytes, 0, bytes}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
    PTRAIN_DIST_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm, s));
  });
}

// One element all-reduced on the scratch, waited for on the host.
void NcclComm::do_barrier(const Group& g) {
  run(key_of(g), nullptr, {nullptr, 0, 0, 0}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
    PTRAIN_DIST_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, s));
  });
}

// Runs one collective. `enqueue(buffer, comm, stream)` issues it on the comm stream; `buffer` is
// the caller's data when `data` is device memory, else the device scratch. `out` is where staged
// results go (default: `data`). `overlap`: see run_on_device (staged collectives are waited for).
void NcclComm::run(const CommKey& key, const void* data, Staging staging, const Enqueue& enqueue, void* out,
                   bool overlap) {
  reap();
  if (is_device(data)) {
    run_on_device(key, const_cast<void*>(data), enqueue, overlap, comm_stream_);
    return;
  }
  run_staged(key, staging, out != nullptr ? out : const_cast<void*>(data), enqueue);
}

}  // namespace ptrain::dist
