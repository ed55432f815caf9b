#include "engine/parallel/expert_parallel.h"

#include <stdexcept>
#include <string>

namespace ptrain::parallel {

ExpertParallel::ExpertParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& ep)
    : comm_(comm),
      ep_(ep),
      staged_(memory, comm) {
  if (!ep.has_me()) throw std::invalid_argument("ExpertParallel: this rank is not in ep group " + ep.name);
}

void ExpertParallel::exchange(kernels::Buf send, kernels::Buf recv, std::int64_t block) {
  staged_.all_to_all(comm_, ep_, send, recv, block);
}

}  // namespace ptrain::parallel
