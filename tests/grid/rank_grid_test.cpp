// RankGrid against hand-worked examples (Megatron's documented 8-rank layout among them).
#include "engine/grid/rank_grid.h"

#include <catch2/catch.hpp>
#include <stdexcept>

using ptrain::grid::Axis;
using ptrain::grid::Degrees;
using ptrain::grid::GroupList;
using ptrain::grid::RankGrid;

namespace {

RankGrid make_ok(const Degrees& d, std::string_view order) {
  std::vector<std::string> problems;
  RankGrid grid = RankGrid::make(d, order, true, &problems);
  INFO("order " << order);
  for (const auto& p : problems) INFO(p);
  REQUIRE(problems.empty());
  return grid;
}

std::vector<std::string> problems_of(const Degrees& d, std::string_view order) {
  std::vector<std::string> problems;
  RankGrid::make(d, order, true, &problems);
  return problems;
}

bool any_contains(const std::vector<std::string>& messages, std::string_view needle) {
  for (const auto& m : messages) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("worked example: 8 ranks, tp=dp=pp=2, order tp-cp-ep-dp-pp") {
  Degrees d;
  d.tp = 2, d.dp = 2, d.pp = 2;
  const RankGrid grid = make_ok(d, "tp-cp-ep-dp-pp");
  CHECK(grid.world() == 8);
  CHECK(grid.groups("tp") == GroupList{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.groups("dp") == GroupList{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups("pp") == GroupList{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.groups("cp") == GroupList{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK(grid.groups("dp-cp") == grid.groups("dp"));
  CHECK(grid.groups("tp-dp") == GroupList{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.groups("tp-dp-cp") == GroupList{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.groups("tp-pp") == GroupList{{0, 1, 4, 5}, {2, 3, 6, 7}});
  CHECK(grid.groups("tp-cp-dp-pp") == GroupList{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(grid.embedding_groups() == grid.groups("pp"));
  CHECK(grid.coord(5, Axis::Tp) == 1);
  CHECK(grid.coord(5, Axis::Dp) == 0);
  CHECK(grid.coord(5, Axis::Pp) == 1);
  CHECK(grid.rank_of({1, 0, 0, 1, 1}) == 7);
}

TEST_CASE("expert grid carved from tp*cp*dp") {
  Degrees d;
  d.tp = 2, d.dp = 2, d.pp = 2, d.ep = 2;
  const RankGrid grid = make_ok(d, "tp-cp-ep-dp-pp");
  CHECK(grid.expert_dp() == 2);
  // etp = 1, so ep varies fastest in the expert grid.
  CHECK(grid.expert_groups("ep") == GroupList{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.expert_groups("dp") == GroupList{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.expert_groups("pp") == grid.groups("pp"));
  CHECK(grid.expert_groups("ep-dp") == GroupList{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.coord(3, Axis::Ep) == 1);
  CHECK(grid.expert_coord(3, Axis::Dp) == 1);
  CHECK(grid.expert_coord(3, Axis::Tp) == 0);
}

TEST_CASE("context parallel and a wide expert axis") {
  Degrees d;
  d.tp = 2, d.cp = 2, d.dp = 2, d.ep = 4;
  const RankGrid grid = make_ok(d, "tp-cp-ep-dp-pp");
  CHECK(grid.groups("cp") == GroupList{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups("dp-cp") == GroupList{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(grid.groups("cp-dp") == grid.groups("dp-cp"));
  CHECK(grid.groups("tp-cp") == GroupList{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.expert_groups("ep") == GroupList{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.expert_groups("dp") == GroupList{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.embedding_groups() == GroupList{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
}

TEST_CASE("another order: dp varies fastest") {
  Degrees d;
  d.tp = 2, d.dp = 2, d.pp = 2;
  const RankGrid grid = make_ok(d, "dp-tp-pp");  // cp and ep (degree 1) are appended
  CHECK(grid.groups("dp") == GroupList{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.groups("tp") == GroupList{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups("pp") == GroupList{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.order() == std::array<Axis, 5>{Axis::Dp, Axis::Tp, Axis::Pp, Axis::Cp, Axis::Ep});
}

TEST_CASE("pp first: pipeline neighbours are adjacent ranks") {
  Degrees d;
  d.tp = 2, d.pp = 4;
  const RankGrid grid = make_ok(d, "pp-tp-cp-ep-dp");
  CHECK(grid.groups("pp") == GroupList{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.embedding_groups() == GroupList{{0, 3}, {4, 7}});
  CHECK(grid.groups("tp") == GroupList{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
}

TEST_CASE("group_of returns the group holding a rank") {
  Degrees d;
  d.tp = 2, d.dp = 3, d.pp = 2, d.ep = 3;
  const RankGrid grid = make_ok(d, "tp-cp-ep-dp-pp");
  CHECK(grid.group_of(9, "dp") == ptrain::grid::Group{7, 9, 11});
  CHECK(grid.group_of(9, "pp") == ptrain::grid::Group{3, 9});
  CHECK(grid.expert_group_of(4, "ep") == ptrain::grid::Group{3, 4, 5});
}

TEST_CASE("problems are reported with the fix") {
  Degrees d;
  d.tp = 2, d.dp = 2, d.pp = 2;
  CHECK(any_contains(problems_of(d, "tp-xp-dp-pp"), "unknown axis 'xp'"));
  CHECK(any_contains(problems_of(d, "tp-dp-dp-pp"), "names dp twice"));
  CHECK(any_contains(problems_of(d, "tp--dp-pp"), "unknown axis ''"));
  CHECK(any_contains(problems_of(d, "tp-pp"), "leaves out dp, whose degree is 2"));
  CHECK(problems_of(d, "tp-dp-pp").empty());

  Degrees zero = d;
  zero.tp = 0;
  CHECK(any_contains(problems_of(zero, "tp-cp-ep-dp-pp"), "parallel.tp must be at least 1"));

  Degrees bad_ep = d;
  bad_ep.ep = 3;
  CHECK(any_contains(problems_of(bad_ep, "tp-cp-ep-dp-pp"), "parallel.ep = 3 must divide tp*cp*dp = 4"));

  SECTION("an order that makes the expert pp groups differ names the fix") {
    // Dense: tp (2) sits before pp. Expert: etp = 1, so nothing sits before pp.
    const auto problems = problems_of(d, "tp-pp-cp-ep-dp");
    REQUIRE(problems.size() == 1);
    CHECK(any_contains(problems, "different pp groups"));
    CHECK(any_contains(problems, "put pp last (e.g. tp-cp-ep-dp-pp)"));
  }
  SECTION("a dense model has no expert grid to disagree: Llama 3's tp-cp-pp-dp is usable") {
    for (const char* order : {"tp-pp-cp-ep-dp", "tp-cp-ep-pp-dp"}) {
      std::vector<std::string> problems;
      const RankGrid dense = RankGrid::make(d, order, false, &problems);
      INFO(order);
      CHECK(problems.empty());
      CHECK(dense.groups("pp") == GroupList{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
      CHECK(dense.groups("dp") == GroupList{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
    }
  }
}

TEST_CASE("malformed axis combinations throw") {
  Degrees d;
  d.tp = 2;
  const RankGrid grid = make_ok(d, "tp-cp-ep-dp-pp");
  CHECK_THROWS_AS(grid.groups("ep"), std::invalid_argument);
  CHECK_THROWS_AS(grid.groups(""), std::invalid_argument);
  CHECK_THROWS_AS(grid.groups("tp-tp"), std::invalid_argument);
  CHECK_THROWS_AS(grid.groups("tp,dp"), std::invalid_argument);
  CHECK_THROWS_AS(grid.expert_groups("tp"), std::invalid_argument);
  CHECK_THROWS_AS(grid.expert_groups("cp"), std::invalid_argument);
}
