// Where ranks sit: the distinct (pp, tp, ep) positions a layout has (every rank shares the numbers
// of one of them, so per-rank work never loops over all ranks), and which of a rank's groups cross
// nodes. A node is rank / cluster.gpus_per_node; a group whose ranks lie on more than one node
// uses the inter-node network, otherwise NVLink.
#pragma once

#include <vector>

#include "engine/grid/rank_grid.h"

namespace ptrain::plan {

struct Position {
  int rank = 0;  // the lowest rank at this position
  int pp_rank = 0, tp_rank = 0, ep_rank = 0;
};

// Sorted by rank. Enumerates the tp*cp*dp ranks of one pipeline stage, not the world.
std::vector<Position> distinct_positions(const grid::RankGrid& grid);

struct LinkTiers {  // per axis of one rank: true = its group crosses nodes
  bool tp = false, cp = false, ep = false, pp = false;
  bool dp_cp = false;      // the dense ZeRO group
  bool expert_dp = false;  // the expert ZeRO group (expert grid's dp axis)
};

// `experts`: whether the model has experts (else ep and expert_dp are left false). Lists no group:
// a group's lowest and highest rank say it (grid::RankGrid::group_span), at any world size.
LinkTiers link_tiers(const grid::RankGrid& grid, int rank, int gpus_per_node, bool experts);
// link_tiers of the first rank of each pipeline stage (its other coordinates 0), by pp rank.
std::vector<LinkTiers> stage_link_tiers(const grid::RankGrid& grid, int gpus_per_node, bool experts);

}  // namespace ptrain::plan
