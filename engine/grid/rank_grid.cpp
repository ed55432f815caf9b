#include "engine/grid/rank_grid.h"

#include <optional>
#include <stdexcept>

namespace ptrain::grid {
namespace {

constexpr std::array<Axis, kAxes> kAllAxes = {Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp};
constexpr std::string_view kDefaultOrder = "tp-cp-ep-dp-pp";

int index(Axis a) {
  return static_cast<int>(a);
}

std::optional<Axis> parse_axis(std::string_view name) {
  for (Axis a : kAllAxes) {
    if (name == to_string(a)) return a;
  }
  return std::nullopt;
}

std::vector<std::string_view> split_dashes(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dash = text.find('-', start);
    parts.push_back(
        text.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start));
    if (dash == std::string_view::npos) return parts;
    start = dash + 1;
  }
}

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

// Parses `parallel.order`; axes it leaves out go at the end (Megatron). Problems are appended.
std::array<Axis, kAxes> parse_order(std::string_view order, const Degrees& d,
                                    std::vector<std::string>& problems) {
  std::array<Axis, kAxes> result{};
  std::array<bool, kAxes> seen{};
  int count = 0;
  const size_t problems_before = problems.size();
  for (std::string_view token : split_dashes(order)) {
    const std::optional<Axis> axis = parse_axis(token);
    if (!axis) {
      problems.push_back("parallel.order " + quoted(order) + ": unknown axis " + quoted(token) +
                         "; expected dash-separated axes out of tp, cp, ep, dp, pp (e.g. " +
                         std::string(kDefaultOrder) + ")");
    } else if (seen[index(*axis)]) {
      problems.push_back("parallel.order " + quoted(order) + " names " + to_string(*axis) +
                         " twice; name every axis at most once (e.g. " + std::string(kDefaultOrder) + ")");
    } else {
      seen[index(*axis)] = true;
      result[count++] = *axis;
    }
  }
  for (Axis a : kAllAxes) {
    if (seen[index(a)]) continue;
    if (d[a] > 1) {
      problems.push_back("parallel.order " + quoted(order) + " leaves out " + to_string(a) +
                         ", whose degree is " + std::to_string(d[a]) + "; add it (e.g. " +
                         std::string(kDefaultOrder) + ")");
    }
    result[count++] = a;
  }
  if (problems.size() != problems_before) {
    return kAllAxes;  // keep the grid well-formed; it is flagged unusable anyway
  }
  return result;
}

// Which axes a combination such as "dp-cp" names, indexed by Axis. Throws on anything outside
// `allowed`, on duplicates and on empty names: combinations are constants in the calling code.
std::array<bool, kAxes> parse_combination(std::string_view axes, const std::array<bool, kAxes>& allowed,
                                          const char* grid_name) {
  std::array<bool, kAxes> named{};
  for (std::string_view token : split_dashes(axes)) {
    const std::optional<Axis> axis = parse_axis(token);
    if (!axis || !allowed[index(*axis)]) {
      throw std::invalid_argument("axis " + quoted(token) + " in " + quoted(axes) +
                                  " is not an axis of the " + grid_name + " grid");
    }
    if (named[index(*axis)]) {
      throw std::invalid_argument("axis " + quoted(token) + " appears twice in " + quoted(axes));
    }
    named[index(*axis)] = true;
  }
  return named;
}

}  // namespace

const char* to_string(Axis a) {
  switch (a) {
    case Axis::Tp:
      return "tp";
    case Axis::Cp:
      return "cp";
    case Axis::Ep:
      return "ep";
    case Axis::Dp:
      return "dp";
    case Axis::Pp:
      return "pp";
  }
  return "?";
}

int Degrees::operator[](Axis a) const {
  switch (a) {
    case Axis::Tp:
      return tp;
    case Axis::Cp:
      return cp;
    case Axis::Ep:
      return ep;
    case Axis::Dp:
      return dp;
    case Axis::Pp:
      return pp;
  }
  return 1;
}

RankGrid RankGrid::make(const Degrees& degrees, std::string_view order, bool experts,
                        std::vector<std::string>* problems) {
  std::vector<std::string> found;
  RankGrid grid;
  grid.degrees_ = degrees;
  for (Axis a : kAllAxes) {
    if (degrees[a] < 1) {
      found.push_back(std::string("parallel.") + to_string(a) + " must be at least 1 (got " +
                      std::to_string(degrees[a]) + ")");
    }
  }
  if (!found.empty()) {
    grid.degrees_ = Degrees{};  // all ones: every query stays defined
    grid.order_ = kAllAxes;
    if (problems) problems->insert(problems->end(), found.begin(), found.end());
    return grid;
  }
  grid.order_ = parse_order(order, degrees, found);

  const int carved = degrees.tp * degrees.cp * degrees.dp;
  if (carved % degrees.ep != 0) {
    found.push_back("parallel.ep = " + std::to_string(degrees.ep) +
                    " must divide tp*cp*dp = " + std::to_string(carved) +
                    ": expert ranks are carved from the tensor, context and data ranks");
  }

  if (experts && found.empty() && grid.groups("pp") != grid.expert_groups("pp")) {
    int dense_before = 1, expert_before = 1;
    const Sizes dense = grid.dense_sizes(), expert = grid.expert_sizes();
    for (Axis a : grid.order_) {
      if (a == Axis::Pp) break;
      dense_before *= dense[index(a)];
      expert_before *= expert[index(a)];
    }
    const auto ranks = [](int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); };
    found.push_back(
        "order " + quoted(order) + " gives the experts different pp groups than attention: with tp = " +
        std::to_string(degrees.tp) + ", cp = " + std::to_string(degrees.cp) + ", ep = " + std::to_string(degrees.ep) +
        ", dp = " + std::to_string(degrees.dp) + ", the axes before pp span " + ranks(dense_before) +
        " for attention (tp*cp*dp laid out as ordered) but " + ranks(expert_before) +
        " for the experts (ep*expert-dp, where expert-dp = tp*cp*dp/ep = " + std::to_string(grid.expert_dp()) +
        "), so the two would disagree on which ranks form a pipeline stage; a model with experts needs both "
        "spans equal, which tp, cp, ep and dp all on one side of pp always give: put pp last (e.g. " +
        std::string(kDefaultOrder) + ") or first (e.g. pp-tp-cp-ep-dp)");
  }
  if (problems) problems->insert(problems->end(), found.begin(), found.end());
  return grid;
}

int RankGrid::expert_dp() const {
  return degrees_.tp * degrees_.cp * degrees_.dp / degrees_.ep;
}

RankGrid::Sizes RankGrid::dense_sizes() const {
  Sizes s{};
  s[index(Axis::Tp)] = degrees_.tp;
  s[index(Axis::Cp)] = degrees_.cp;
  s[index(Axis::Ep)] = 1;
  s[index(Axis::Dp)] = degrees_.dp;
  s[index(Axis::Pp)] = degrees_.pp;
  return s;
}

RankGrid::Sizes RankGrid::expert_sizes() const {
  Sizes s{};
  s[index(Axis::Tp)] = 1;
  s[index(Axis::Cp)] = 1;
  s[index(Axis::Ep)] = degrees_.ep;
  s[index(Axis::Dp)] = expert_dp();
  s[index(Axis::Pp)] = degrees_.pp;
  return s;
}

int RankGrid::stride_in(const Sizes& sizes, Axis axis) const {
  int stride = 1;
  for (Axis a : order_) {
    if (a == axis) break;
    stride *= sizes[index(a)];
  }
  return stride;
}

int RankGrid::coord_in(const Sizes& sizes, int rank, Axis axis) const {
  return rank / stride_in(sizes, axis) % sizes[index(axis)];
}

// A group along one axis is the ranks whose coordinate on it alone differs: its stride and size fix
// which ranks those are, whatever the other axes (and at size 1 every group is one rank).
bool RankGrid::ep_groups_are_tp_groups() const {
  return degrees_.ep == degrees_.tp &&
         (degrees_.tp == 1 || stride_in(expert_sizes(), Axis::Ep) == stride_in(dense_sizes(), Axis::Tp));
}

int RankGrid::coord(int rank, Axis axis) const {
  return axis == Axis::Ep ? expert_coord(rank, axis) : coord_in(dense_sizes(), rank, axis);
}

int RankGrid::expert_coord(int rank, Axis axis) const {
  return coord_in(expert_sizes(), rank, axis);
}

int RankGrid::rank_of(const std::array<int, kAxes>& coords) const {
  const Sizes sizes = dense_sizes();
  int rank = 0, stride = 1;
  for (Axis a : order_) {
    if (a != Axis::Ep) rank += coords[index(a)] * stride;
    stride *= sizes[index(a)];
  }
  return rank;
}

namespace {

// The group holding `rank`: ranks that differ from it only along the named axes, listed by the
// mixed-radix index over the named axes (in `order`, first fastest).
Group group_holding(int rank, const std::array<int, kAxes>& sizes, const std::array<Axis, kAxes>& order,
                    const std::array<bool, kAxes>& named) {
  std::array<int, kAxes> strides{};
  int stride = 1, base = rank, members = 1;
  for (Axis a : order) {
    const int i = index(a);
    strides[i] = stride;
    if (named[i]) {
      base -= (rank / stride % sizes[i]) * stride;  // zero this coordinate
      members *= sizes[i];
    }
    stride *= sizes[i];
  }
  Group group;
  group.reserve(members);
  for (int member = 0; member < members; ++member) {
    int r = base, rest = member;
    for (Axis a : order) {
      const int i = index(a);
      if (!named[i]) continue;
      r += (rest % sizes[i]) * strides[i];
      rest /= sizes[i];
    }
    group.push_back(r);
  }
  return group;
}

// The ranks that differ from `rank` only along the named axes run from the one with those coordinates
// 0 to the one with each at its largest.
RankGrid::Span span_holding(int rank, const std::array<int, kAxes>& sizes, const std::array<Axis, kAxes>& order,
                            const std::array<bool, kAxes>& named) {
  RankGrid::Span span{rank, 0};
  int stride = 1, extent = 0;
  for (Axis a : order) {
    const int i = index(a);
    if (named[i]) {
      span.lowest -= (rank / stride % sizes[i]) * stride;
      extent += (sizes[i] - 1) * stride;
    }
    stride *= sizes[i];
  }
  span.highest = span.lowest + extent;
  return span;
}

constexpr std::array<bool, kAxes> kDenseAxes = {true, true, false, true, true};    // tp cp - dp pp
constexpr std::array<bool, kAxes> kExpertAxes = {false, false, true, true, true};  // - - ep dp pp

}  // namespace

GroupList RankGrid::groups_in(const Sizes& sizes, std::string_view axes, bool expert) const {
  const std::array<bool, kAxes> named =
      parse_combination(axes, expert ? kExpertAxes : kDenseAxes, expert ? "expert" : "dense");
  GroupList result;
  for (int rank = 0; rank < world(); ++rank) {
    // A group's lowest rank is the one at coordinate 0 on every named axis: build each group
    // once, there, so the cost is proportional to the world size.
    bool lowest = true;
    for (Axis a : kAllAxes) lowest = lowest && (!named[index(a)] || coord_in(sizes, rank, a) == 0);
    if (lowest) result.push_back(group_holding(rank, sizes, order_, named));
  }
  return result;
}

GroupList RankGrid::groups(std::string_view axes) const {
  return groups_in(dense_sizes(), axes, false);
}

GroupList RankGrid::expert_groups(std::string_view axes) const {
  return groups_in(expert_sizes(), axes, true);
}

Group RankGrid::group_of(int rank, std::string_view axes) const {
  return group_holding(rank, dense_sizes(), order_, parse_combination(axes, kDenseAxes, "dense"));
}

Group RankGrid::expert_group_of(int rank, std::string_view axes) const {
  return group_holding(rank, expert_sizes(), order_, parse_combination(axes, kExpertAxes, "expert"));
}

RankGrid::Span RankGrid::group_span(int rank, std::string_view axes) const {
  return span_holding(rank, dense_sizes(), order_, parse_combination(axes, kDenseAxes, "dense"));
}

RankGrid::Span RankGrid::expert_group_span(int rank, std::string_view axes) const {
  return span_holding(rank, expert_sizes(), order_, parse_combination(axes, kExpertAxes, "expert"));
}

GroupList RankGrid::embedding_groups() const {
  GroupList result;
  for (const Group& pp_group : groups("pp")) {
    if (pp_group.size() == 1) {
      result.push_back(pp_group);
    } else {
      result.push_back({pp_group.front(), pp_group.back()});
    }
  }
  return result;
}

}  // namespace ptrain::grid
