// This rank's process groups, built from the job's rank grid (config/job_grid.h) in one place. Every
// rank builds every group, in grid order (group creation is collective): the dp-cp groups (ZeRO);
// with tp > 1 the tp groups (tensor parallelism, the gradient norm) and, with fewer kv heads than
// tp ranks, the groups of tp ranks sharing a kv head; with cp > 1 the cp groups (attention's keys and
// values); with ep > 1 the ep groups (the experts' all-to-alls) and the expert-dp groups (ZeRO of the
// experts); with pp > 1 the pp groups (the pipeline's messages, the gradient norm) and, with a tied
// head, the embedding groups (first and last stage). A group this rank does not need is nullptr.
#pragma once

#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"
#include "engine/grid/rank_grid.h"

namespace ptrain::dist {

struct ParallelGroups {
  const Group* dp = nullptr;  // dp-cp: ZeRO shards over data and context ranks
  const Group* tp = nullptr;
  const Group* kv_copies = nullptr;
  const Group* cp = nullptr;
  const Group* ep = nullptr;
  const Group* expert_dp = nullptr;
  const Group* pp = nullptr;
  const Group* embedding = nullptr;
  int pp_rank = 0, tp_rank = 0, ep_rank = 0;
  int dp_rank = 0;  // which slice of each global batch this rank trains on (its cp group shares it)
};

// Throws std::invalid_argument when `comm` has another number of ranks than the job.
ParallelGroups make_parallel_groups(const config::JobSpec& spec, Comm& comm, bool tied_head);

// The tp ranks that hold the same kv head: consecutive runs of tp / kv_heads within each tp group
// (model/param_registry.h); none when every rank has its own kv heads.
grid::GroupList kv_copy_groups(const grid::GroupList& tp_groups, int tp, int kv_heads);

}  // namespace ptrain::dist
