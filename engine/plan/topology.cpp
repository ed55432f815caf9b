#include "engine/plan/topology.h"

#include <algorithm>
#include <set>
#include <utility>

namespace ptrain::plan {
namespace {

// A group's ranks are ascending, so its lowest and highest say whether it leaves a node.
bool spans_nodes(const grid::RankGrid::Span& group, int gpus_per_node) {
  return group.lowest / gpus_per_node != group.highest / gpus_per_node;
}

}  // namespace

std::vector<Position> distinct_positions(const grid::RankGrid& grid) {
  const grid::Degrees& d = grid.degrees();
  std::set<std::pair<int, int>> seen;  // (tp_rank, ep_rank)
  std::vector<std::array<int, grid::kAxes>> stage0;
  for (int dp = 0; dp < d.dp; ++dp) {
    for (int cp = 0; cp < d.cp; ++cp) {
      for (int tp = 0; tp < d.tp; ++tp) {
        const std::array<int, grid::kAxes> coords = {tp, cp, 0, dp, 0};
        const int ep = grid.coord(grid.rank_of(coords), grid::Axis::Ep);
        if (seen.insert({tp, ep}).second) stage0.push_back(coords);
      }
    }
  }
  std::vector<Position> positions;
  for (int pp = 0; pp < d.pp; ++pp) {
    for (std::array<int, grid::kAxes> coords : stage0) {
      coords[static_cast<int>(grid::Axis::Pp)] = pp;
      const int rank = grid.rank_of(coords);
      positions.push_back(
          {rank, pp, coords[static_cast<int>(grid::Axis::Tp)], grid.coord(rank, grid::Axis::Ep)});
    }
  }
  std::sort(positions.begin(), positions.end(),
            [](const Position& a, const Position& b) { return a.rank < b.rank; });
  return positions;
}

LinkTiers link_tiers(const grid::RankGrid& grid, int rank, int gpus_per_node, bool experts) {
  auto dense = [&](const char* axes) { return spans_nodes(grid.group_span(rank, axes), gpus_per_node); };
  auto expert = [&](const char* axes) {
    return experts && spans_nodes(grid.expert_group_span(rank, axes), gpus_per_node);
  };
  return {dense("tp"), dense("cp"), expert("ep"), dense("pp"), dense("dp-cp"), expert("dp")};
}

std::vector<LinkTiers> stage_link_tiers(const grid::RankGrid& grid, int gpus_per_node, bool experts) {
  std::vector<LinkTiers> tiers;
  for (int r = 0; r < grid.degrees().pp; ++r)
    tiers.push_back(link_tiers(grid, grid.rank_of({0, 0, 0, 0, r}), gpus_per_node, experts));
  return tiers;
}

}  // namespace ptrain::plan
