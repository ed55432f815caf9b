// Distinct rank positions and link tiers.
#include "engine/plan/topology.h"

#include <catch2/catch.hpp>

using namespace ptrain;

namespace {

grid::RankGrid make_grid(grid::Degrees d, std::string_view order = "tp-cp-ep-dp-pp") {
  std::vector<std::string> problems;
  grid::RankGrid g = grid::RankGrid::make(d, order, true, &problems);
  REQUIRE(problems.empty());
  return g;
}

}  // namespace

TEST_CASE("positions: one per distinct (pp, tp, ep), at its lowest rank") {
  grid::Degrees d;
  d.tp = 2, d.dp = 2, d.pp = 2;
  const auto dense = plan::distinct_positions(make_grid(d));
  REQUIRE(dense.size() == 4);
  CHECK(dense[1].rank == 1);
  CHECK(dense[1].tp_rank == 1);
  CHECK(dense[2].rank == 4);
  CHECK(dense[2].pp_rank == 1);

  // ep 2 carved from tp 1 x dp 4: the ep coordinate follows dp, so ranks 0 and 1 differ in ep
  grid::Degrees e;
  e.dp = 4, e.ep = 2;
  const auto experts = plan::distinct_positions(make_grid(e));
  REQUIRE(experts.size() == 2);
  CHECK(experts[0].ep_rank == 0);
  CHECK(experts[1].rank == 1);
  CHECK(experts[1].ep_rank == 1);
}

TEST_CASE("link tiers: a group on more than one node crosses nodes") {
  grid::Degrees d;
  d.tp = 4, d.dp = 2, d.pp = 2;  // 16 ranks on 4-GPU nodes: tp fills a node
  const grid::RankGrid g = make_grid(d);
  const plan::LinkTiers t = plan::link_tiers(g, 5, 4, false);
  CHECK(!t.tp);
  CHECK(t.dp_cp);
  CHECK(t.pp);
  CHECK(!t.cp);
  CHECK(!t.ep);
  CHECK(!plan::link_tiers(g, 5, 16, false).pp);  // one 16-GPU node holds everything
}
