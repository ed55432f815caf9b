// Collectives on a backend's buffers through a Comm that may not take that memory. The CPU's memory,
// and device memory with a Comm that takes it (NCCL), pass straight through; CUDA buffers with Gloo
// (ranks that share a GPU cannot share an NCCL communicator) go through a host copy and back. The
// in-place collectives go through run(); the all-to-all and the messages between two ranks have
// their own entries, since what they send and receive are different buffers.
#pragma once

#include <cstddef>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/comm.h"
#include "kernels/ops.h"

namespace ptrain::parallel {

// The Comm element type of a float buffer (F32 or BF16; another dtype is a programming error).
inline dist::ElemType comm_type(kernels::DType dtype) {
  if (dtype == kernels::DType::F32) return dist::ElemType::F32;
  if (dtype == kernels::DType::BF16) return dist::ElemType::BF16;
  throw std::invalid_argument(std::string("collectives on float buffers only, not ") +
                              kernels::to_string(dtype));
}

class StagedCollectives {
 public:
  StagedCollectives(const kernels::Ops& memory, const dist::Comm& comm)
      : memory_(memory),
        passes_through_(memory.device() == kernels::Device::Cpu || comm.takes_device_memory()) {}

  // Runs collective(p) over group g for the `bytes` bytes at `data` (in memory's device), p being
  // where the Comm reads and writes them; nothing for a group of one rank, which would change nothing.
  template <typename Collective>
  void run(const dist::Group& g, void* data, std::size_t bytes, Collective&& collective) {
    if (g.size() == 1) return;
    if (passes_through_) return collective(data);
    staging_.resize(bytes);
    memory_.copy_to_host(staging_.data(), {data, kernels::DType::F32}, bytes);
    collective(staging_.data());
    memory_.copy_to_device({data, kernels::DType::F32}, staging_.data(), bytes);
  }

  // Block j (`block` elements from j * block) of `send` to member j of g, whose block i of `recv`
  // it becomes (i: this rank); both buffers hold g.size() blocks of one float dtype and do not
  // overlap. The Comm moves floats: a bf16 block travels as half as many (its bytes unchanged), so
  // a bf16 block must be an even number of elements.
  void all_to_all(dist::Comm& comm, const dist::Group& g, kernels::Buf send, kernels::Buf recv, std::int64_t block);

  // x (n F32 values in memory's device) replaced by their elementwise maximum over g: FP8 amaxes.
  void all_max(dist::Comm& comm, const dist::Group& g, kernels::Buf x, std::int64_t n) {
    run(g, x.ptr, static_cast<std::size_t>(n) * sizeof(float), [&](void* p) {
      comm.all_reduce(g, static_cast<float*>(p), static_cast<std::size_t>(n), dist::ReduceOp::Max);
    });
  }

  // Starts sending `bytes` of `data` to member `peer` of g (Comm::isend; `data` may change at once
  // when staged, else not before finish_sends()).
  void send(dist::Comm& comm, const dist::Group& g, kernels::Buf data, std::size_t bytes, int peer);
  // Receives `bytes` from member `peer` of g into `into`.
  void recv(dist::Comm& comm, const dist::Group& g, kernels::Buf into, std::size_t bytes, int peer);
  // Waits for every send started since the last call.
  void finish_sends();

 private:
  const kernels::Ops& memory_;
  bool passes_through_;
  std::vector<std::byte> staging_;
  std::vector<std::byte> receiving_;                        // recv's host copy
  std::deque<std::vector<std::byte>> sending_;              // the host copies of the sends in flight
  std::vector<dist::Comm::SendHandle> sends_;
};

}  // namespace ptrain::parallel
