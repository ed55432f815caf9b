#include <algorithm>
#include <cmath>

#include "engine/config/moe_capacity.h"

namespace ptrain::config {

int expert_capacity(const JobSpec& spec) {
  if (!spec.model.moe) return 0;
  const MoeSpec& moe = *spec.model.moe;
  const int T = spec.model.seq_len;
  const double wanted = std::ceil(moe.capacity_factor * moe.top_k * static_cast<double>(T) / moe.experts);
  return static_cast<int>(std::min<double>(T, wanted));
}

std::int64_t expert_token_slots(const JobSpec& spec) {
  if (!spec.model.moe) return 0;
  const ParallelSpec& p = spec.parallel;
  const std::int64_t sequences = static_cast<std::int64_t>(spec.train.micro_batch) * p.ep;
  // Split over the tp group (ep = tp), the experts take the group's slots; otherwise a rank's static
  // buffers hold every slot of the sequences it routes (model/moe_block.h).
  const std::int64_t sharers = spec.parallel.experts_over_tp ? p.tp : 1;
  const std::int64_t per_expert = (sequences * expert_capacity(spec) + sharers - 1) / sharers;
  return spec.model.moe->experts / p.ep * per_expert;
}

std::int64_t expert_block_rows(const JobSpec& spec) {
  if (!spec.model.moe) return 0;
  const ParallelSpec& p = spec.parallel;
  const bool exchanged = p.ep > 1 && !spec.parallel.experts_over_tp;  // every source rank's slots of each local expert
  return expert_token_slots(spec) / (spec.model.moe->experts / p.ep) / (exchanged ? p.ep : 1);
}

}  // namespace ptrain::config
