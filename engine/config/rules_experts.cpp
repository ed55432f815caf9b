#include "engine/config/arith.h"
#include "engine/config/job_grid.h"
#include "engine/config/rules.h"
#include "engine/config/text.h"

namespace ptrain::config {
namespace {

void check_dense_model(LoadContext& ctx) {
  const JobSpec& spec = ctx.spec();
  const char* arch = to_string(spec.model.arch);
  if (spec.model.moe && !ctx.any_bad({"model.moe"})) {
    ctx.error("model.moe", cat("model.moe is only for arch mixtral, got arch ", arch),
              "remove model.moe, or set model.arch: mixtral");
    ctx.mark_bad("model.moe");
  }
  if (spec.parallel.ep > 1 && !ctx.any_bad({"parallel.ep"})) {
    ctx.error("parallel.ep",
              cat("parallel.ep = ", spec.parallel.ep,
                  " needs a mixture-of-experts model (model.arch: mixtral), got arch ", arch),
              "set parallel.ep: 1");
    ctx.mark_bad("parallel.ep");
  }
}

void check_experts(LoadContext& ctx) {
  JobSpec& spec = ctx.spec();
  if (!spec.model.moe) spec.model.moe.emplace();
  const MoeSpec& moe = *spec.model.moe;
  const ParallelSpec& p = spec.parallel;
  if (!ctx.any_bad({"model.moe.top_k", "model.moe.experts"}) && moe.top_k > moe.experts) {
    ctx.error("model.moe.top_k",
              cat("model.moe.top_k = ", moe.top_k, " must be in [1, model.moe.experts = ", moe.experts, "]"),
              cat("use top_k <= ", moe.experts));
  }
  if (!ctx.any_bad({"model.moe.experts", "parallel.ep"}) && moe.experts % p.ep != 0) {
    ctx.error("model.moe.experts",
              cat("model.moe.experts = ", moe.experts, " is not divisible by parallel.ep = ", p.ep,
                  " (each expert rank holds experts/ep experts)"),
              cat("use parallel.ep dividing ", moe.experts, ": ", list_numbers(divisors(moe.experts))));
  }
  if (ctx.any_bad({"parallel.ep", "parallel.tp", "parallel.cp", "parallel.dp"})) return;
  // Valid once dp is resolved: tp*cp*dp <= world, so the product fits.
  std::int64_t expert_pool = saturating_product({p.tp, p.cp, p.dp});
  if (expert_pool % p.ep != 0) {
    ctx.error("parallel.ep",
              cat("parallel.ep = ", p.ep, " must divide tp*cp*dp = ", spelled_product({p.tp, p.cp, p.dp}),
                  " (expert ranks are carved from the tp*cp*dp ranks of each pipeline stage)"),
              cat("use parallel.ep dividing ", expert_pool, ": ", list_numbers(divisors(expert_pool))));
    ctx.mark_bad("parallel.ep");
  }
}

// What the order check and the rules above leave to the grid itself: whether the dense and the
// expert grid agree on the pipeline stages (a model with experts only). A grid without problems
// resolves parallel.experts_over_tp.
void check_grid(LoadContext& ctx) {
  ParallelSpec& p = ctx.spec().parallel;
  p.experts_over_tp = false;
  if (ctx.any_bad({"parallel.tp", "parallel.cp", "parallel.ep", "parallel.dp", "parallel.pp", "parallel.order",
                   "model.moe"}))
    return;
  std::vector<std::string> problems;
  const grid::RankGrid grid = make_job_grid(ctx.spec(), &problems);
  for (const std::string& problem : problems) ctx.error("parallel.order", problem);
  if (!problems.empty()) return ctx.mark_bad("parallel.order");
  p.experts_over_tp = ctx.spec().model.moe && p.tp > 1 && p.ep == p.tp && grid.ep_groups_are_tp_groups();
}

}  // namespace

void resolve_experts(LoadContext& ctx) {
  if (ctx.any_bad({"model.arch"})) return;
  if (ctx.spec().model.arch == Arch::Mixtral) {
    check_experts(ctx);
  } else {
    check_dense_model(ctx);
  }
  check_grid(ctx);
}

}  // namespace ptrain::config
