#include "engine/parallel/staged_collectives.h"

#include <string>

namespace ptrain::parallel {

void StagedCollectives::all_to_all(dist::Comm& comm, const dist::Group& g, kernels::Buf send,
                                   kernels::Buf recv, std::int64_t block) {
  if (send.dtype != recv.dtype) throw std::invalid_argument("all_to_all: send and recv dtypes differ");
  const std::size_t bytes = static_cast<std::size_t>(block) * kernels::dtype_size(send.dtype);
  if (bytes % sizeof(float) != 0)
    throw std::invalid_argument("all_to_all: a block of " + std::to_string(block) +
                                " bf16 elements is not a whole number of 4-byte words");
  const std::size_t words = bytes / sizeof(float), total = bytes * static_cast<std::size_t>(g.size());
  if (passes_through_)
    return comm.all_to_all(g, static_cast<const float*>(send.ptr), static_cast<float*>(recv.ptr), words);
  staging_.resize(2 * total);
  float* host_in = reinterpret_cast<float*>(staging_.data());
  float* host_out = reinterpret_cast<float*>(staging_.data() + total);
  memory_.copy_to_host(host_in, send, total);
  comm.all_to_all(g, host_in, host_out, words);
  memory_.copy_to_device(recv, host_out, total);
}

void StagedCollectives::send(dist::Comm& comm, const dist::Group& g, kernels::Buf data, std::size_t bytes,
                             int peer) {
  if (passes_through_) {
    sends_.push_back(comm.isend(g, data.ptr, bytes, peer));
    return;
  }
  std::vector<std::byte>& host = sending_.emplace_back(bytes);
  memory_.copy_to_host(host.data(), data, bytes);
  sends_.push_back(comm.isend(g, host.data(), bytes, peer));
}

void StagedCollectives::recv(dist::Comm& comm, const dist::Group& g, kernels::Buf into, std::size_t bytes,
                             int peer) {
  if (passes_through_) return comm.recv(g, into.ptr, bytes, peer);
  receiving_.resize(bytes);
  comm.recv(g, receiving_.data(), bytes, peer);
  memory_.copy_to_device(into, receiving_.data(), bytes);
}

void StagedCollectives::finish_sends() {
  for (dist::Comm::SendHandle& s : sends_) s.wait();
  sends_.clear();
  sending_.clear();
}

}  // namespace ptrain::parallel
