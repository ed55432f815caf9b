#include "engine/parallel/expert_parallel.h"

#include <stdexcept>
#include <string>

namespace ptrain::parallel {

ExpertParallel::ExpertParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& ep)
    : comm_(comm),
      memory_(memory),
      ep_(ep),
      passes_through_(memory.device() == kernels::Device::Cpu || comm.takes_device_memory()) {
  if (!ep.has_me()) throw std::invalid_argument("ExpertParallel: this rank is not in ep group " + ep.name);
}

void ExpertParallel::exchange(kernels::Buf send, kernels::Buf recv, std::int64_t block) {
  if (send.dtype != recv.dtype)
    throw std::invalid_argument("ExpertParallel::exchange: send and recv dtypes differ");
  // The Comm moves floats: a bf16 block travels as half as many (its bytes unchanged).
  const std::size_t bytes = static_cast<std::size_t>(block) * kernels::dtype_size(send.dtype);
  if (bytes % sizeof(float) != 0)
    throw std::invalid_argument("ExpertParallel::exchange: a block of " + std::to_string(block) +
                                " bf16 elements is not a whole number of 4-byte words");
  const std::size_t words = bytes / sizeof(float), total = bytes * static_cast<std::size_t>(size());
  if (passes_through_)
    return comm_.all_to_all(ep_, static_cast<const float*>(send.ptr), static_cast<float*>(recv.ptr), words);
  host_in_.resize(words * static_cast<std::size_t>(size()));
  host_out_.resize(host_in_.size());
  memory_.copy_to_host(host_in_.data(), send, total);
  comm_.all_to_all(ep_, host_in_.data(), host_out_.data(), words);
  memory_.copy_to_device(recv, host_out_.data(), total);
}

}  // namespace ptrain::parallel
