#include "engine/plan/step_time.h"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/config/job_grid.h"
#include "engine/config/stage_placement.h"
#include "engine/plan/fp8_time.h"
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
    StageCompute compute;
    if (hw.measured) {
      compute = stage_compute(spec, ops, *hw.measured, static_cast<int>(v), spec.schedule.resolved_layers_per_stage[v]);
    } else {
      compute.forward.gemm = flops.forward[v] / flops_per_s;
      compute.backward.gemm = (flops.forward[v] + flops.recompute[v]) / flops_per_s;
      compute.weight_grad.gemm = flops.forward[v] / flops_per_s;
      if (spec.train.precision == config::Precision::Fp8) {
        const StageCompute fp8 = fp8_at_peak(spec, ops, hw, spec.schedule.resolved_layers_per_stage[v]);
        compute.forward += fp8.forward, compute.backward += fp8.backward, compute.weight_grad += fp8.weight_grad;
      }
    }
    // The engine's cp collectives block like tp's (allgather's k/v gathers and their gradients'
    // reduce-scatter, a2a's head exchanges), but ring's hops on a device transport run beside the
    // attention: each of the cp-1 hops beside one of the cp blocks a rank attends, so what shows is
    // what the hops take beyond (cp-1)/cp of the attention (timed attention only: peak x 60% lumps
    // it with the GEMMs, and then nothing is taken as hidden). On a host transport (Gloo) a hop
    // moves only once both ranks are in it, so it is charged whole.
    double cp_forward = seconds(comm.cp_forward, hw, tiers.cp), cp_backward = seconds(comm.cp_backward, hw, tiers.cp);
    if (spec.parallel.cp_comm == config::CpComm::Ring && !hw.host_collectives) {
      const double beside = (spec.parallel.cp - 1.0) / spec.parallel.cp;
      cp_forward = std::max(0.0, cp_forward - beside * compute.forward.attention);
      cp_backward = std::max(0.0, cp_backward - beside * compute.backward.attention);
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
    // Each hides behind its own window (the reduction behind the last microbatch's backward, ZeRO 3's
    // gathers behind the step's compute), but both cross the one link: together they are exposed
    // by at least what the link needs beyond the compute.
    const double reduction_exposed = std::max(seconds(last_bucket, hw, inter_node), reduction - backward_window_s);
    exposed += std::max(reduction_exposed + std::max(0.0, zero3_gathers - busy_s), reduction + zero3_gathers - busy_s);
  }
  return exposed;
}

double optimizer_seconds(const config::JobSpec& spec, const HardwareProfile& hw, const RankParams& params,
                         double forward_window_s) {
  const config::ParallelSpec& p = spec.parallel;
  const BytesPerElement b = bytes_per_element(spec.train.precision);
  const double elements = updated_elements(spec, params);  // ZeRO 1-3: only the rank's shards
  const double on_device =
      hw.measured ? rank_slowdown(spec, *hw.measured) * memory_seconds(*hw.measured, "optimizer/f32", 4.0 * elements, false)
                  : 2.0 * (b.param + b.grad + b.optimizer()) * elements / hw.hbm_bytes_per_s;
  if (p.offload != config::Offload::Optimizer) return on_device;
  // The host's AdamW: the device's own where the device is the host; else it streams the fp32
  // weights, gradients, m and v in and three of them out (28 bytes), plus the bf16 copy.
  const double host_update =
      hw.device_is_host() ? on_device : (28.0 + (b.param < 4 ? 4.0 + b.param : 0.0)) * elements / hw.host_memory_bytes_per_s;
  const double down = 4.0 * elements / hw.host_link_bytes_per_s, up = b.param * elements / hw.host_link_bytes_per_s;
  const double units = std::max(1, params.dense_units + params.expert_units);
  return down + std::max((host_update + up) / units, host_update + up - forward_window_s);
}

StepTail step_tail(const config::JobSpec& spec, const HardwareProfile& hw, const RankParams& params,
                   const LinkTiers& tiers, int pp_rank, const pipeline::OpCosts& costs,
                   const pipeline::SimResult& sim) {
  const auto r = static_cast<size_t>(pp_rank);
  double backward_window = 0, forward_window = 0, tp_grads = 0;
  for (size_t v = r; v < costs.backward.size(); v += static_cast<size_t>(spec.parallel.pp)) {
    backward_window += costs.backward[v] + costs.weight_grad[v];
    forward_window += costs.forward[v];
    tp_grads += seconds(sequence_parallel_grad_reductions(spec, static_cast<int>(v),
                                                          spec.schedule.resolved_layers_per_stage[v]),
                        hw, tiers.tp);
  }
  return {tp_grads, data_parallel_exposed_seconds(spec, hw, params, tiers, backward_window, sim.busy[r]),
          optimizer_seconds(spec, hw, params, forward_window)};
}

}  // namespace ptrain::plan
