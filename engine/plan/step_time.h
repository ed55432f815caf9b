// Step time and MFU. Per microbatch on virtual stage v (held by pp rank v mod pp): with a measured
// profile (hw.measured), F, B and W are the layer description's ops timed from it
// (compute_time.h) plus the blocking collectives; without one, with peak = the hardware's dense
// peak for the precision and kGemmEfficiency of it achieved:
//   F_v = fwd_flops_v / (peak * eff) + tp_fwd_comm_v + ep_fwd_comm_v + cp_fwd_comm_v
//   B_v = (fwd_flops_v + recompute_flops_v) / (peak * eff) + tp_bwd_comm_v + ep_bwd_comm_v + cp_bwd_comm_v
//   W_v = fwd_flops_v / (peak * eff)            (weight grads: backward = 2x forward overall)
// (flops: flops.h; comm: traffic.h, each collective from the profile's measured table inside a
// node, else bytes_sent / link bandwidth + latency on the link of its group's tier). The schedule
// runs W inside B unless it splits it (zb-h1). p2p = one pipeline message / link + latency.
//   pipeline = makespan of simulating pipeline::build(spec, m) with these costs
//   dp_exposed (per rank) = max(one bucket, t_grad_reduction - the last microbatch's B+W on the
//              rank's chunks, which the bucketed reduction overlaps)
//              + zero 1/2: the param all-gather after the step (not overlapped)
//              + zero 3: max(0, t_param_gathers - the rank's busy time) (prefetched)
//   optimizer  = with a measured profile, its AdamW table at the rank's shard; else
//              2 * (param + grad + optimizer bytes per element) * elements of the rank's ZeRO
//              shard / HBM bandwidth     (AdamW reads and writes every state once)
//   step = pipeline + max over ranks (dp_exposed + optimizer)
//   MFU  = model_flops_per_step / (world * peak * step)
#pragma once

#include <vector>

#include "engine/config/job_spec.h"
#include "engine/pipeline/simulator.h"
#include "engine/plan/compute_time.h"
#include "engine/plan/flops.h"
#include "engine/plan/hardware.h"
#include "engine/plan/rank_params.h"
#include "engine/plan/topology.h"

namespace ptrain::plan {

// Fraction of peak FLOP/s that training GEMMs sustain (Megatron-LM reports 50-60% MFU at scale on
// A100/H100; 0.6 is the optimistic end, so the estimate bounds what a layout can reach).
inline constexpr double kGemmEfficiency = 0.6;

// What one microbatch costs on one virtual stage, by part: compute by kind (F, B and W together)
// and the blocking collectives of each axis (forward and backward).
struct StageParts {
  ComputeSeconds compute;
  double tp = 0, cp = 0, ep = 0;
};

// Costs per virtual stage for the simulator. `tiers_by_pp_rank[r]` are the link tiers of a rank
// of pipeline stage r. `parts`, if given, receives each virtual stage's StageParts.
pipeline::OpCosts stage_op_costs(const config::JobSpec& spec, const HardwareProfile& hw,
                                 const StageFlops& flops, const std::vector<LinkTiers>& tiers_by_pp_rank,
                                 std::vector<StageParts>* parts = nullptr);
// The same for a loaded job, building what it needs (used by `ptrain schedule`).
pipeline::OpCosts stage_op_costs(const config::JobSpec& spec, const HardwareProfile& hw);

// Seconds of a rank's data-parallel communication not hidden behind compute (all of it when the
// hardware's collectives are on the host). `backward_window_s`:
// the rank's backward (B + W) of one microbatch over its chunks; `busy_s`: its compute per step.
// The gradient reduction and ZeRO 3's gathers share the dp link: never less exposed than their
// sum beyond `busy_s`.
double data_parallel_exposed_seconds(const config::JobSpec& spec, const HardwareProfile& hw,
                                     const RankParams& params, const LinkTiers& tiers,
                                     double backward_window_s, double busy_s);
// The update's seconds at the end of the step. Offloaded (parallel.offload: optimizer), what the
// step waits for: the gradients' copy to the host, and whatever of the host's AdamW and the weights'
// copies back does not fit under the next step's first forward (`forward_window_s`: one
// microbatch's over the rank's chunks), at least the first unit's.
double optimizer_seconds(const config::JobSpec& spec, const HardwareProfile& hw, const RankParams& params,
                         double forward_window_s);

// What a rank adds to the pipeline's makespan at the end of the step: under sequence parallelism
// the norms' gradient sums over tp (traffic.h: sequence_parallel_grad_reductions, blocking calls
// between the backward and the data-parallel reduction), the exposed data-parallel communication
// and the update.
struct StepTail {
  double tp_grads = 0, dp_exposed = 0, optimizer = 0;
  double total() const { return tp_grads + dp_exposed + optimizer; }
};
// For a rank of pipeline stage `pp_rank` holding `params`, given the schedule's costs and its
// simulation: the backward window is the last microbatch's B + W over the rank's chunks.
StepTail step_tail(const config::JobSpec& spec, const HardwareProfile& hw, const RankParams& params,
                   const LinkTiers& tiers, int pp_rank, const pipeline::OpCosts& costs,
                   const pipeline::SimResult& sim);

}  // namespace ptrain::plan
