#include "engine/plan/step_time.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/config/job_grid.h"
#include "engine/config/stage_placement.h"
#include "engine/plan/traffic.h"
#include "engine/plan/dtypes.h"

namespace ptrain::plan {

pipeline::OpCosts stage_op_costs(const config::JobSpec& spec, const HardwareProfile& hw,
                                 const StageFlops& flops, const std::vector<LinkTiers>& tiers_by_pp_rank,
                                 std::vector<StageParts>* parts) {
  const double flops_per_s = hw.peak_flops(spec.train.precision) * kGemmEfficiency;
  const int pp = spec.parallel.pp;
  const size_t stages = flops.forward.size();
  const model::ModelOps ops = model::model_ops(spec);
  pipeline::OpCosts costs;
  costs.forward.resize(stages);
  costs.backward.resize(stages);
  costs.weight_grad.resize(stages);
  const config::StagePlacement place = config::StagePlacement::of(spec);
  for (size_t v = 0; v < stages; ++v) {
    const LinkTiers& tiers = tiers_by_pp_rank[static_cast<size_t>(place.holder(static_cast<int>(v)).rank)];
    const StageTraffic comm = stage_traffic(spec, ops, static_cast<int>(v), spec.schedule.resolved_layers_per_stage[v]);
    const double tp_forward = seconds(comm.tp_forward, hw, tiers.tp),
                 tp_backward = seconds(comm.tp_backward, hw, tiers.tp);
    const double ep_forward = seconds(comm.ep_forward, hw, tiers.ep),
                 ep_backward = seconds(comm.ep_backward, hw, tiers.ep);
    // The engine's cp collectives (whole-sequence k/v gathers, their gradients' reduce-scatter)
    // block like tp's.
    const double cp_forward = seconds(comm.cp_forward, hw, tiers.cp),
                 cp_backward = seconds(comm.cp_backward, hw, tiers.cp);
    StageCompute compute;
    if (hw.measured) {
      compute = stage_compute(spec, ops, *hw.measured, static_cast<int>(v), spec.schedule.resolved_layers_per_stage[v]);
    } else {
      compute.forward.gemm = flops.forward[v] / flops_per_s;
      compute.backward.gemm = (flops.forward[v] + flops.recompute[v]) / flops_per_s;
      compute.weight_grad.gemm = flops.forward[v] / flops_per_s;
    }
    costs.forward[v] = compute.forward.total() + tp_forward + ep_forward + cp_forward;
    costs.backward[v] = compute.backward.total() + tp_backward + ep_backward + cp_backward;
    costs.weight_grad[v] = compute.weight_grad.total();
    if (parts != nullptr) {
      StageParts part{compute.forward, tp_forward + tp_backward, cp_forward + cp_backward, ep_forward + ep_backward};
      part.compute += compute.backward;
      part.compute += compute.weight_grad;
      parts->push_back(part);
    }
  }
  costs.p2p_seconds = pp > 1 ? seconds(pipeline_message(spec), hw, tiers_by_pp_rank.front().pp) : 0.0;
  return costs;
}

pipeline::OpCosts stage_op_costs(const config::JobSpec& spec, const HardwareProfile& hw) {
  const std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
  const grid::RankGrid grid = config::job_grid(spec);
  return stage_op_costs(spec, hw, stage_flops(spec, matmul_params(registry, spec.model)),
                        stage_link_tiers(grid, spec.cluster.gpus_per_node, spec.model.moe.has_value()));
}

double data_parallel_exposed_seconds(const config::JobSpec& spec, const HardwareProfile& hw,
                                     const RankParams& params, const LinkTiers& tiers,
                                     double backward_window_s, double busy_s) {
  const DataParallelTraffic dp = data_parallel_traffic(spec, params);
  double exposed = 0;
  for (const auto& [zero, inter_node] :
       {std::pair{&dp.dense, tiers.dp_cp}, std::pair{&dp.expert, tiers.expert_dp}}) {
    if (zero->grad_reduction.empty()) continue;
    Collective last_bucket = zero->grad_reduction.front();
    last_bucket.count = 1;
    const double reduction = seconds(zero->grad_reduction, hw, inter_node),
                 zero3_gathers = seconds(zero->param_gather_zero3, hw, inter_node);
    exposed += seconds(zero->param_gather_after_step, hw, inter_node);
    if (hw.host_collectives) {
      exposed += reduction + zero3_gathers;
      continue;
    }
    exposed += std::max(seconds(last_bucket, hw, inter_node), reduction - backward_window_s);
    exposed += std::max(0.0, zero3_gathers - busy_s);
  }
  return exposed;
}

double optimizer_seconds(const config::JobSpec& spec, const HardwareProfile& hw, const RankParams& params) {
  const config::ParallelSpec& p = spec.parallel;
  const BytesPerElement b = bytes_per_element(spec.train.precision);
  const bool sharded = p.zero >= 1;  // each rank updates only its shard of the optimizer state
  const double dense_shards = sharded ? p.dp * p.cp : 1;
  const double expert_shards = sharded ? p.tp * p.cp * p.dp / p.ep : 1;
  const double elements =
      static_cast<double>(params.dense) / dense_shards + static_cast<double>(params.expert) / expert_shards;
  if (hw.measured)
    return rank_slowdown(spec, *hw.measured) * memory_seconds(*hw.measured, "optimizer/f32", 4.0 * elements, false);
  return 2.0 * (b.param + b.grad + b.optimizer()) * elements / hw.hbm_bytes_per_s;
}

StepTail step_tail(const config::JobSpec& spec, const HardwareProfile& hw, const RankParams& params,
                   const LinkTiers& tiers, int pp_rank, const pipeline::OpCosts& costs,
                   const pipeline::SimResult& sim) {
  const auto r = static_cast<size_t>(pp_rank);
  double backward_window = 0;
  for (size_t v = r; v < costs.backward.size(); v += static_cast<size_t>(spec.parallel.pp))
    backward_window += costs.backward[v] + costs.weight_grad[v];
  return {data_parallel_exposed_seconds(spec, hw, params, tiers, backward_window, sim.busy[r]),
          optimizer_seconds(spec, hw, params)};
}

}  // namespace ptrain::plan
