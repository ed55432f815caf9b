#include <algorithm>
#include <array>
#include <map>

#include "engine/config/arith.h"
#include "engine/config/rules.h"
#include "engine/config/text.h"

namespace ptrain::config {
namespace {

constexpr std::array<std::string_view, 5> kAxes = {"tp", "cp", "ep", "dp", "pp"};

void resolve_world(LoadContext& ctx, std::optional<int> world) {
  JobSpec& spec = ctx.spec();
  if (world) {
    if (*world < 1 || *world > kMaxWorld) {
      ctx.report_error({"world", 0, 0, cat("the world size must be in [1, ", kMaxWorld, "], got ", *world),
                        "pass a positive --world / --nproc", "command line"});
      ctx.mark_bad("world");
      return;
    }
    spec.world = *world;
    ctx.world_source = "from the command line";
    return;
  }
  if (ctx.any_bad({"cluster.nodes", "cluster.gpus_per_node"})) {
    ctx.mark_bad("world");
    return;
  }
  std::int64_t ranks = saturating_product({spec.cluster.nodes, spec.cluster.gpus_per_node});
  ctx.world_source = cat("cluster.nodes*cluster.gpus_per_node = ",
                         spelled_product({spec.cluster.nodes, spec.cluster.gpus_per_node}));
  if (ranks > kMaxWorld) {
    ctx.error("cluster.nodes", cat(ctx.world_source, " ranks is more than the supported ", kMaxWorld),
              "describe the cluster you will run on");
    ctx.mark_bad("world");
    return;
  }
  spec.world = static_cast<int>(ranks);
}

void resolve_dp(LoadContext& ctx) {
  ParallelSpec& p = ctx.spec().parallel;
  if (ctx.any_bad({"world", "parallel.tp", "parallel.pp", "parallel.cp", "parallel.dp"})) {
    ctx.mark_bad("parallel.dp");
    return;
  }
  const int world = ctx.spec().world;
  const std::int64_t model_ranks = saturating_product({p.tp, p.pp, p.cp});
  if (p.dp_auto) {
    if (world % model_ranks != 0) {
      ctx.error("parallel.dp",
                cat("dp: auto needs a world size that is a multiple of tp*pp*cp = ",
                    spelled_product({p.tp, p.pp, p.cp}), ", but the world has ", world, " ranks (",
                    ctx.world_source, ")"),
                cat("run on a multiple of ", model_ranks, " ranks, or lower parallel.tp, pp or cp"));
      ctx.mark_bad("parallel.dp");
      return;
    }
    p.dp = static_cast<int>(world / model_ranks);
    return;
  }
  const std::int64_t total = saturating_product({model_ranks, p.dp});
  if (total != world) {
    std::string fix =
        world % model_ranks == 0
            ? cat("set parallel.dp: auto (dp = ", world / model_ranks, ") or run on ", total, " ranks")
            : cat("run on ", total, " ranks, or choose degrees with tp*pp*cp*dp = ", world);
    ctx.error("parallel.dp",
              cat("tp*pp*cp*dp = ", spelled_product({p.tp, p.pp, p.cp, p.dp}), " but the world has ", world,
                  " ranks (", ctx.world_source, ")"),
              fix);
    ctx.mark_bad("parallel.dp");
  }
}

void check_order(LoadContext& ctx) {
  const std::string& order = ctx.spec().parallel.order;
  if (ctx.any_bad({"parallel.order"})) return;
  std::map<std::string_view, int> counts;
  std::vector<std::string> problems;
  std::size_t begin = 0;
  while (begin <= order.size()) {
    std::size_t dash = std::min(order.find('-', begin), order.size());
    std::string_view axis = std::string_view(order).substr(begin, dash - begin);
    if (axis.empty()) {
      problems.emplace_back("an axis name is empty");
    } else if (std::find(kAxes.begin(), kAxes.end(), axis) == kAxes.end()) {
      problems.push_back(cat("unknown axis ", quoted(printable(axis, 20))));
    } else {
      ++counts[axis];
    }
    begin = dash + 1;
  }
  for (std::string_view axis : kAxes) {
    if (counts[axis] == 0) problems.push_back(cat(quoted(axis), " is missing"));
    if (counts[axis] > 1) problems.push_back(cat(quoted(axis), " appears ", counts[axis], " times"));
  }
  if (problems.empty()) return;
  constexpr std::size_t kShownProblems = 6;
  if (problems.size() > kShownProblems) {
    problems.resize(kShownProblems);
    problems.emplace_back("...");
  }
  ctx.error("parallel.order",
            cat("must name each of tp, cp, ep, dp, pp exactly once, joined by '-'; got ",
                quoted(printable(order)), ": ", join(problems, "; ")),
            "e.g. order: tp-cp-ep-dp-pp (the first axis varies fastest)");
  ctx.mark_bad("parallel.order");
}

void check_sequence_parallel(LoadContext& ctx) {
  const ParallelSpec& p = ctx.spec().parallel;
  if (ctx.any_bad({"parallel.sequence_parallel", "parallel.tp"})) return;
  if (p.sequence_parallel && p.tp == 1) {
    ctx.warning("parallel.sequence_parallel",
                "has no effect with parallel.tp = 1 (it splits activations over the tp ranks)",
                "remove it, or set parallel.tp > 1");
  }
}

}  // namespace

void resolve_parallel(LoadContext& ctx, std::optional<int> world) {
  resolve_world(ctx, world);
  resolve_dp(ctx);
  check_order(ctx);
  check_sequence_parallel(ctx);
}

}  // namespace ptrain::config
