// RankGrid properties over many degree combinations and every order of the five axes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "engine/grid/rank_grid.h"

using ptrain::grid::Axis;
using ptrain::grid::Degrees;
using ptrain::grid::Group;
using ptrain::grid::GroupList;
using ptrain::grid::RankGrid;

namespace {

constexpr std::array<Axis, 5> kAxesInEnumOrder = {Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp};
constexpr std::array<Axis, 4> kDenseAxes = {Axis::Tp, Axis::Cp, Axis::Dp, Axis::Pp};
constexpr std::array<Axis, 3> kExpertAxes = {Axis::Ep, Axis::Dp, Axis::Pp};

std::string join_order(const std::array<Axis, 5>& order) {
  std::string s;
  for (Axis a : order) s += (s.empty() ? "" : "-") + std::string(to_string(a));
  return s;
}

// Dense and expert sizes per axis, computed here independently of the grid.
std::array<int, 5> dense_sizes(const Degrees& d) {
  return {d.tp, d.cp, 1, d.dp, d.pp};
}
std::array<int, 5> expert_sizes(const Degrees& d) {
  return {1, 1, d.ep, d.tp * d.cp * d.dp / d.ep, d.pp};
}

// Megatron semantics written out: rank = sum of coord * (product of the sizes of earlier axes).
std::array<int, 5> coords_of(int rank, const std::array<int, 5>& sizes, const std::array<Axis, 5>& order) {
  std::array<int, 5> c{};
  for (Axis a : order) {
    const int size = sizes[static_cast<int>(a)];
    c[static_cast<int>(a)] = rank % size;
    rank /= size;
  }
  return c;
}

int product_before_pp(const std::array<int, 5>& sizes, const std::array<Axis, 5>& order) {
  int p = 1;
  for (Axis a : order) {
    if (a == Axis::Pp) break;
    p *= sizes[static_cast<int>(a)];
  }
  return p;
}

// Every property a group list over `named` axes must have, checked from first principles.
// Returns the first violation, empty if none (one assertion per list keeps the sweep fast).
std::string group_list_violation(const GroupList& groups, const std::array<int, 5>& sizes,
                                 const std::array<Axis, 5>& order, const std::vector<Axis>& named,
                                 int world) {
  int group_size = 1;
  for (Axis a : named) group_size *= sizes[static_cast<int>(a)];
  if (static_cast<int>(groups.size()) * group_size != world) return "group count * group size != world";

  std::vector<int> seen(world, 0);
  int previous_front = -1;
  for (const Group& g : groups) {
    if (static_cast<int>(g.size()) != group_size) return "group size is not the product of the degrees";
    if (g.front() <= previous_front) return "groups not ordered by their lowest rank";
    previous_front = g.front();
    if (!std::is_sorted(g.begin(), g.end())) return "ranks in a group not ascending";
    const auto base = coords_of(g.front(), sizes, order);
    std::set<std::array<int, 5>> distinct;
    for (int r : g) {
      if (r < 0 || r >= world) return "rank out of range";
      ++seen[r];
      const auto c = coords_of(r, sizes, order);
      distinct.insert(c);
      for (Axis a : kAxesInEnumOrder) {
        const bool is_named = std::find(named.begin(), named.end(), a) != named.end();
        if (!is_named && c[static_cast<int>(a)] != base[static_cast<int>(a)]) {
          return "members differ along an axis that is not named";
        }
      }
    }
    if (static_cast<int>(distinct.size()) != group_size) return "duplicate coordinates in a group";
  }
  if (!std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }))
    return "not a partition of the ranks";
  return "";
}

template <size_t N>
std::vector<std::vector<Axis>> nonempty_subsets(const std::array<Axis, N>& axes) {
  std::vector<std::vector<Axis>> subsets;
  for (unsigned mask = 1; mask < (1u << N); ++mask) {
    std::vector<Axis> s;
    for (size_t i = 0; i < N; ++i) {
      if (mask & (1u << i)) s.push_back(axes[i]);
    }
    subsets.push_back(s);
  }
  return subsets;
}

std::string combination(const std::vector<Axis>& axes, bool reversed) {
  std::string s;
  auto add = [&](Axis a) { s += (s.empty() ? "" : "-") + std::string(to_string(a)); };
  if (reversed) {
    std::for_each(axes.rbegin(), axes.rend(), add);
  } else {
    std::for_each(axes.begin(), axes.end(), add);
  }
  return s;
}

struct Sweep {
  std::vector<Degrees> degrees;
  std::vector<std::array<Axis, 5>> orders;
};

Sweep make_sweep() {
  Sweep sweep;
  for (int tp : {1, 2, 3}) {
    for (int cp : {1, 2}) {
      for (int dp : {1, 2, 4}) {
        for (int pp : {1, 2, 3}) {
          const int carved = tp * cp * dp;
          for (int ep = 1; ep <= carved; ++ep) {
            if (carved % ep != 0 || (ep != 1 && ep != 2 && ep != carved)) continue;
            Degrees d;
            d.tp = tp, d.cp = cp, d.dp = dp, d.pp = pp, d.ep = ep;
            sweep.degrees.push_back(d);
          }
        }
      }
    }
  }
  std::array<Axis, 5> order = kAxesInEnumOrder;
  do {
    sweep.orders.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return sweep;
}

}  // namespace

TEST_CASE("properties over degree combinations and all 120 orders") {
  const Sweep sweep = make_sweep();
  const auto dense_combos = nonempty_subsets(kDenseAxes);
  const auto expert_combos = nonempty_subsets(kExpertAxes);
  int usable = 0, rejected = 0;
  for (const Degrees& d : sweep.degrees) {
    for (const auto& order : sweep.orders) {
      const std::string order_text = join_order(order);
      INFO("tp=" << d.tp << " cp=" << d.cp << " dp=" << d.dp << " pp=" << d.pp << " ep=" << d.ep << " order "
                 << order_text);
      std::vector<std::string> problems;
      const RankGrid grid = RankGrid::make(d, order_text, true, &problems);

      const auto dense = dense_sizes(d), expert = expert_sizes(d);
      // pp groups are {first + k * (ranks before pp)}: they agree iff those spans agree.
      const bool pp_groups_agree =
          d.pp == 1 || product_before_pp(dense, order) == product_before_pp(expert, order);
      CHECK(problems.empty() == pp_groups_agree);
      if (!problems.empty()) {
        ++rejected;
        continue;
      }
      ++usable;
      const int world = d.tp * d.cp * d.dp * d.pp;
      REQUIRE(grid.world() == world);
      CHECK(grid.order() == order);

      bool coords_match = true;
      for (int rank = 0; rank < world; ++rank) {
        const auto c = coords_of(rank, dense, order);
        const auto ce = coords_of(rank, expert, order);
        for (Axis a : kDenseAxes) coords_match &= grid.coord(rank, a) == c[static_cast<int>(a)];
        for (Axis a : kAxesInEnumOrder) coords_match &= grid.expert_coord(rank, a) == ce[static_cast<int>(a)];
        coords_match &= grid.coord(rank, Axis::Ep) == ce[static_cast<int>(Axis::Ep)];
        coords_match &= grid.rank_of(c) == rank;  // mixed-radix round trip
      }
      CHECK(coords_match);

      for (const auto& axes : dense_combos) {
        const std::string name = combination(axes, false);
        const GroupList groups = grid.groups(name);
        INFO("groups " << name);
        CHECK(group_list_violation(groups, dense, order, axes, world) == "");
        CHECK(grid.groups(combination(axes, true)) == groups);  // spelling order does not matter
        bool group_of_matches = true;
        for (int rank = 0; rank < world; ++rank) {
          const Group mine = grid.group_of(rank, name);
          group_of_matches &= std::find(mine.begin(), mine.end(), rank) != mine.end();
          group_of_matches &= std::find(groups.begin(), groups.end(), mine) != groups.end();
          const RankGrid::Span span = grid.group_span(rank, name);
          group_of_matches &= span.lowest == mine.front() && span.highest == mine.back();
        }
        CHECK(group_of_matches);
      }
      for (const auto& axes : expert_combos) {
        const std::string name = combination(axes, false);
        INFO("expert groups " << name);
        CHECK(group_list_violation(grid.expert_groups(name), expert, order, axes, world) == "");
        bool span_matches = true;
        for (int rank = 0; rank < world; ++rank) {
          const Group mine = grid.expert_group_of(rank, name);
          const RankGrid::Span span = grid.expert_group_span(rank, name);
          span_matches &= span.lowest == mine.front() && span.highest == mine.back();
        }
        CHECK(span_matches);
      }
      CHECK(grid.expert_groups("pp") == grid.groups("pp"));
      CHECK(grid.expert_groups("ep-dp") == grid.groups("tp-cp-dp"));  // same ranks per pp stage
      // the strides' shortcut against the listed groups
      CHECK(grid.ep_groups_are_tp_groups() == (d.ep == d.tp && grid.expert_groups("ep") == grid.groups("tp")));

      const GroupList pp_groups = grid.groups("pp");
      const GroupList embedding = grid.embedding_groups();
      REQUIRE(embedding.size() == pp_groups.size());
      for (size_t i = 0; i < embedding.size(); ++i) {
        CHECK(embedding[i].size() == (d.pp == 1 ? 1u : 2u));
        CHECK(grid.coord(embedding[i].front(), Axis::Pp) == 0);
        CHECK(grid.coord(embedding[i].back(), Axis::Pp) == d.pp - 1);
        CHECK(embedding[i].front() == pp_groups[i].front());
        CHECK(embedding[i].back() == pp_groups[i].back());
      }
    }
  }
  INFO("usable " << usable << ", rejected " << rejected);
  CHECK(usable > 1000);
  CHECK(rejected > 100);
}
