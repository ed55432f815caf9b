// RankGrid: ranks as mixed-radix numbers over the parallel degrees, in the order of
// `parallel.order` (first axis varies fastest), with Megatron RankGenerator semantics.
//
// Two generators share the same ranks:
//  - the dense grid  (tp, cp, dp, pp; ep = 1) used by attention/dense layers;
//  - the expert grid (etp = 1, ep, edp = tp*cp*dp/ep, pp; cp = 1) used by MoE experts: expert
//    ranks are carved from tp*cp*dp (docs/parallelism.md, "Rank grid"). For a model with experts both must yield
//    identical pp groups; a dense model has no experts to lay out, so any order whose dense grid
//    is valid is usable (Llama 3's tp-cp-pp-dp among them).
// Both use the same order string; in the expert grid tp and cp have size 1 and "dp" means edp.
// Every rank computes every group in the same order (group creation is collective).
//
// Order string: dash-separated axis names, first varies fastest ("tp-cp-ep-dp-pp"). As in
// Megatron, an axis of degree 1 may be left out; it is appended at the end.
//
// Group enumeration (both grids): a group is the set of ranks that agree on every axis not named
// in the combination. Groups are listed by their lowest rank, ascending. Inside a group, ranks are
// listed by the mixed-radix index over the named axes, taken in `parallel.order` order (the first
// of them in the order string varies fastest; the spelling of the combination does not matter:
// "dp-cp" == "cp-dp"). Because a rank is the mixed-radix number over the same order, that index
// order is also ascending rank order, and the group order is also Megatron's enumeration order.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace ptrain::grid {

enum class Axis { Tp = 0, Cp = 1, Ep = 2, Dp = 3, Pp = 4 };
inline constexpr int kAxes = 5;
const char* to_string(Axis);

struct Degrees {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  int operator[](Axis a) const;
  int world() const { return tp * cp * dp * pp; }  // ep is carved, not multiplied
};

using Group = std::vector<int>;        // ranks, ascending in the varying axes' mixed-radix order
using GroupList = std::vector<Group>;  // all groups of one kind, ordered by their lowest rank

class RankGrid {
 public:
  // Problems (bad order string, a degree < 1, ep not dividing tp*cp*dp, and with `experts` pp
  // groups of the two generators disagreeing) are returned as messages; the grid is usable only if
  // none. Without `experts` (a dense model, ep = 1) the expert grid is never consulted for layout.
  static RankGrid make(const Degrees& degrees, std::string_view order, bool experts,
                       std::vector<std::string>* problems);

  const Degrees& degrees() const { return degrees_; }
  // Every axis exactly once, first varies fastest (axes left out of the string appended).
  const std::array<Axis, kAxes>& order() const { return order_; }
  int world() const { return degrees_.world(); }
  // Size of the expert-dp axis: tp*cp*dp / ep.
  int expert_dp() const;

  // Groups of the dense grid over a dash-separated axis combination ("tp", "dp-cp", "tp-cp", ...).
  // "ep" is not a dense axis. Throws std::invalid_argument for a malformed combination (a
  // programming error: combinations are constants in the code).
  GroupList groups(std::string_view axes) const;
  // Groups of the expert grid over a combination of "ep", "dp" (the expert-dp axis) and "pp".
  // Throws std::invalid_argument for any other axis or a malformed combination.
  GroupList expert_groups(std::string_view axes) const;
  // The one group of groups(axes) / expert_groups(axes) that holds `rank` (0 <= rank < world()).
  Group group_of(int rank, std::string_view axes) const;
  Group expert_group_of(int rank, std::string_view axes) const;
  // The lowest and the highest rank of that group, without listing it (which node a group reaches
  // is asked of groups with up to a million ranks).
  struct Span {
    int lowest = 0, highest = 0;
  };
  Span group_span(int rank, std::string_view axes) const;
  Span expert_group_span(int rank, std::string_view axes) const;
  // First and last pp stage of every pp group (one rank if pp == 1): they hold tied embeddings.
  GroupList embedding_groups() const;
  // Whether the expert grid's ep groups are the dense grid's tp groups (ep = tp, the two axes at
  // the same stride). Costs no group listing.
  bool ep_groups_are_tp_groups() const;

  // Coordinate of a rank (0 <= rank < world()) along an axis of the dense grid (Ep -> coordinate in
  // the expert grid).
  int coord(int rank, Axis axis) const;
  // Coordinate of a rank along an axis of the expert grid (Dp -> expert-dp; Tp, Cp -> 0).
  int expert_coord(int rank, Axis axis) const;
  // The rank with these dense coordinates (ep ignored); inverse of coord.
  int rank_of(const std::array<int, kAxes>& coords) const;

 private:
  using Sizes = std::array<int, kAxes>;  // indexed by Axis
  Sizes dense_sizes() const;
  Sizes expert_sizes() const;
  int stride_in(const Sizes& sizes, Axis axis) const;  // the sizes of the axes before it, multiplied
  int coord_in(const Sizes& sizes, int rank, Axis axis) const;
  GroupList groups_in(const Sizes& sizes, std::string_view axes, bool expert) const;

  Degrees degrees_;
  std::array<Axis, kAxes> order_{};
};

}  // namespace ptrain::grid
