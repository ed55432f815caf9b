#include "engine/plan/estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "engine/config/job_grid.h"
#include "engine/model/param_registry.h"
#include "engine/pipeline/schedule_model.h"
#include "engine/plan/traffic.h"
#include "engine/plan/fit.h"
#include "engine/plan/flops.h"
#include "engine/plan/memory_limit.h"
#include "engine/plan/rank_params.h"
#include "engine/plan/step_time.h"
#include "engine/plan/topology.h"

namespace ptrain::plan {
namespace {

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

void count_params(const std::vector<model::ParamInfo>& registry, const config::JobSpec& spec, Estimate& est) {
  std::int64_t expert = 0;
  for (const model::ParamInfo& p : registry) {
    est.params_total += p.numel();
    if (p.expert >= 0) expert += p.numel();
    est.tensors.push_back({p.name, p.shape, model::local_shape(p, spec.parallel.tp)});
  }
  const auto& moe = spec.model.moe;
  est.params_active = est.params_total - expert + (moe ? expert / moe->experts * moe->top_k : 0);
}

void add_volume(CommVolume& to, double bytes, bool inter_node) {
  (inter_node ? to.inter_node : to.intra_node) += bytes;
}

std::map<std::string, CommVolume> axis_volumes(const StepTraffic& s, const LinkTiers& t) {
  std::map<std::string, CommVolume> v = {{"tp", {}}, {"pp", {}}, {"dp", {}}, {"cp", {}}, {"ep", {}}};
  add_volume(v["tp"], s.tp, t.tp);
  add_volume(v["pp"], s.pp, t.pp);
  add_volume(v["dp"], s.dp_dense, t.dp_cp);
  add_volume(v["dp"], s.dp_expert, t.expert_dp);
  add_volume(v["cp"], s.cp, t.cp);
  add_volume(v["ep"], s.ep, t.ep);
  return v;
}

std::string position(const RankEstimate& r) {
  return "rank " + std::to_string(r.rank) + " (pp " + std::to_string(r.pp_rank) + ", tp " + std::to_string(r.tp_rank) +
         ", ep " + std::to_string(r.ep_rank) + ")";
}

// What rank `r` holds against `limit`, by part.
std::string breakdown(const RankEstimate& r, const MemoryLimit& limit) {
  const MemoryBreakdown& m = r.memory;
  char inflight[32];
  std::snprintf(inflight, sizeof inflight, "%.2f", r.peak_inflight);
  return "params " + gib(m.params) + ", grads " + gib(m.grads) + ", optimizer " + gib(m.optimizer) + ", activations " +
         gib(m.activations) + " (" + inflight + " microbatches in flight), comm buffers " + gib(m.comm_buffers) +
         (limit.host && m.host > 0 ? ", offloaded " + gib(m.host) : "") +
         (limit.host && m.checkpoint_copy > 0 ? ", async checkpoint copy " + gib(m.checkpoint_copy) : "");
}

config::Diagnostic over_memory(const config::LoadResult& job, const HardwareProfile& hw, const Estimate& est,
                               const RankEstimate& r, const std::optional<FittingLayout>& fit) {
  const MemoryLimit& limit = est.memory_limit;
  const MemoryBreakdown& m = r.memory;
  const std::string nearest =
      fit ? "the nearest layout that fits (" + gib(fit->peak.memory.total()) + " peak): " + fit->set_line() : "";
  if (!limit.host) {
    const std::string message = "predicted memory " + gib(m.total()) + " on " + position(r) + " exceeds the " +
                                gib(hw.memory_bytes) + " (" + gb(hw.memory_bytes) + ") of " + hw.name + ": " +
                                breakdown(r, limit);
    if (fit) return job.at(fit->changes.front().first, message, nearest);
    return job.at("parallel", message,
                  "no neighbouring layout (higher zero, recompute, tp/pp x2.., smaller micro_batch) fits; "
                  "use more GPUs (cluster.nodes) or a larger device (cluster.gpu)");
  }
  // CPU ranks: what a node's ranks hold together against the host they share.
  const bool given = job.spec.cluster.host_memory_gb > 0;
  const std::string held = limit.ranks == 1
                               ? gib(limit.rank_bytes(m))
                               : gib(limit.rank_bytes(m)) + " per rank x " + std::to_string(limit.ranks) +
                                     " ranks of a node = " + gib(limit.shared_bytes(m));
  const std::string message =
      "predicted memory " + held + " exceeds the " + gib(limit.bytes) + " (" + gb(limit.bytes) +
      ") of the host" + (limit.ranks == 1 ? "" : " they share") +
      (given ? " (cluster.host_memory_gb)" : " (the cpu profile's; cluster.host_memory_gb not given)") +
      "; the most on " + position(r) + ": " + breakdown(r, limit);
  std::string fix = nearest;
  const auto add = [&fix](const std::string& more) { fix += (fix.empty() ? "" : "; or ") + more; };
  const auto fewer = static_cast<int>(limit.bytes / limit.rank_bytes(m));
  if (fewer >= 1 && fewer < limit.ranks)
    add("run at most " + std::to_string(fewer) + (fewer == 1 ? " rank" : " ranks") +
        " on a node (cluster.gpus_per_node=" + std::to_string(fewer) + " with more cluster.nodes)");
  if (!given) add("give the host's memory in cluster.host_memory_gb if it has more");
  if (fix.empty()) fix = "use a smaller model or layout (parallel.zero, train.recompute, train.micro_batch)";
  return job.at(fit ? fit->changes.front().first : "cluster.gpus_per_node", message, fix);
}

// What every rank's numbers are computed from, once per estimate.
struct EstimateInputs {
  const config::JobSpec& spec;
  const HardwareProfile& hw;
  const grid::RankGrid& grid;
  const pipeline::OpCosts& costs;
  const pipeline::SimResult& sim;
  const std::vector<pipeline::RankBuffers>& held;  // what each pp rank's executor holds
  const ActivationCounts& activations;
};

// Memory, communication and the step's tail (exposed dp comm + optimizer) of one position.
// `params` are the position's elements (slice sizes depend on tp, not on the tp rank).
void add_rank(const EstimateInputs& in, const Position& pos, const RankParams& params, Estimate& est) {
  const config::JobSpec& spec = in.spec;
  const auto pp_rank = static_cast<size_t>(pos.pp_rank);
  // Microbatches of a full stage the rank keeps (its chunks' slots, or the slots they share, / vpp).
  const pipeline::RankBuffers& held = in.held[pp_rank];
  const std::vector<int>& slots = held.activation_slots;
  const double live =
      static_cast<double>(held.shared_slots > 0 ? held.shared_slots : std::accumulate(slots.begin(), slots.end(), 0)) /
      static_cast<double>(slots.size());
  est.ranks.push_back({pos.rank, pos.pp_rank, pos.tp_rank, pos.ep_rank, params.total(),
                       rank_memory(in.activations, params, pos.pp_rank, in.held[pp_rank]), live});
  est.peak_inflight = std::max(est.peak_inflight, live);
  if (est.ranks.back().memory.total() > est.peak_memory_bytes())
    est.max_memory_rank = static_cast<int>(est.ranks.size()) - 1;

  const LinkTiers tiers =
      link_tiers(in.grid, pos.rank, spec.cluster.gpus_per_node, spec.model.moe.has_value());
  for (const auto& [axis, volume] : axis_volumes(step_traffic(spec, params, pos.pp_rank), tiers)) {
    CommVolume& most = est.comm_bytes_per_step[axis];
    if (volume.total() >= most.total()) most = volume;
  }

  const StepTail tail = step_tail(spec, in.hw, params, tiers, pos.pp_rank, in.costs, in.sim);
  if (tail.total() > est.tp_grads_s + est.dp_exposed_s + est.optimizer_s) {
    est.tp_grads_s = tail.tp_grads;
    est.dp_exposed_s = tail.dp_exposed;
    est.optimizer_s = tail.optimizer;
  }
}

// The step of the pipeline's critical rank (the bubble's, pipeline/simulator.h: the most compute and
// blocking collectives), by part: its compute, its collectives, its bubble, then the step's tail.
Estimate::StepBreakdown step_breakdown(const config::JobSpec& spec, const std::vector<StageParts>& parts,
                                       const pipeline::SimResult& sim, const Estimate& est) {
  const int pp = spec.parallel.pp;
  const double m = spec.train.microbatches;
  Estimate::StepBreakdown b;
  for (int v = sim.bubble.rank; v < static_cast<int>(parts.size()); v += pp) {
    const StageParts& part = parts[static_cast<size_t>(v)];
    b.gemm_s += m * part.compute.gemm, b.attention_s += m * part.compute.attention;
    b.memory_bound_s += m * part.compute.memory;
    b.tp_s += m * part.tp, b.cp_s += m * part.cp, b.ep_s += m * part.ep;
  }
  b.bubble_s = sim.bubble.seconds;
  b.tp_s += est.tp_grads_s;
  b.dp_s = est.dp_exposed_s;
  b.optimizer_s = est.optimizer_s;
  return b;
}

}  // namespace

Estimate estimate(const config::LoadResult& job, const HardwareProfile& hw) {
  const config::JobSpec& spec = job.spec;
  Estimate est;
  est.world = spec.world;
  est.degrees = config::job_degrees(spec);
  est.hardware = hw.name;
  est.device_memory_bytes = hw.memory_bytes;
  est.microbatches = spec.train.microbatches;
  est.tokens_per_step = static_cast<double>(spec.train.global_batch) * spec.model.seq_len;

  const grid::RankGrid grid = config::job_grid(spec);
  for (const char* axis : {"tp", "pp", "dp", "cp"}) est.groups[axis] = grid.groups(axis);
  est.groups["ep"] = grid.expert_groups("ep");

  const std::vector<model::ParamInfo> registry = model::build_registry(spec.model);
  count_params(registry, spec, est);
  est.layer_activations = model::layer_saved_activations(spec, spec.train.recompute);

  const MatmulParams matmul = matmul_params(registry, spec.model);
  const StepFlops flops = step_flops(spec, matmul);
  est.flops_per_step = flops.model;
  est.hardware_flops_per_step = flops.hardware;

  std::vector<StageParts> parts;
  const pipeline::OpCosts costs =
      stage_op_costs(spec, hw, stage_flops(spec, matmul),
                     stage_link_tiers(grid, spec.cluster.gpus_per_node, spec.model.moe.has_value()), &parts);
  const pipeline::ScheduleModel schedule(spec);  // built from short samples where it is long
  const pipeline::SimResult sim = schedule.simulate(costs);
  const std::vector<pipeline::RankBuffers>& held = schedule.held();
  est.bubble_fraction = sim.bubble.fraction;
  est.bubble_rank = sim.bubble.rank;
  est.idle_fraction = sim.idle_fraction;
  est.max_in_flight = schedule.max_in_flight();

  est.pipeline_s = sim.makespan;

  const ActivationCounts activations(spec);
  const EstimateInputs inputs{spec, hw, grid, costs, sim, held, activations};
  std::map<std::pair<int, int>, RankParams> params_at;  // (pp rank, ep rank) -> elements
  for (const Position& pos : distinct_positions(grid)) {
    auto [it, inserted] = params_at.try_emplace({pos.pp_rank, pos.ep_rank});
    if (inserted) {
      const model::ShardCoords coords = model::shard_coords(spec, pos.pp_rank, pos.tp_rank, pos.ep_rank);
      it->second = count_rank_params(spec, schedule, model::local_params(registry, coords), pos.pp_rank);
    }
    add_rank(inputs, pos, it->second, est);
  }
  est.step_time_s = est.pipeline_s + est.tp_grads_s + est.dp_exposed_s + est.optimizer_s;
  est.breakdown = step_breakdown(spec, parts, sim, est);
  est.compute_model = hw.measured ? std::string(hw.measured->built_in ? "built-in " : "") + "profile of " +
                                        hw.measured->device + " (" + hw.measured->date + ")"
                                  : "peak x " + std::to_string(static_cast<int>(kGemmEfficiency * 100)) + "%";
  if (hw.measured && hw.measured->transfer) {
    char by[96];
    const Transfer& t = *hw.measured->transfer;
    std::snprintf(by, sizeof by, " carried to %s (compute x%.2f, memory x%.2f)", t.to.c_str(),
                  config::bf16_working(spec.train.precision) ? t.bf16_ratio : t.fp32_ratio, t.memory_ratio);
    est.compute_model += by;
  }
  est.expected_error = expected_error(hw.measured.get(), hw.device_is_host());
  if (hw.measured && hw.measured->calibration) {
    char scale[32];
    std::snprintf(scale, sizeof scale, ", calibrated x%.2f", hw.measured->calibration->compute_scale);
    est.compute_model += scale;
  }
  if (hw.measured && spec.train.precision == config::Precision::Fp8)  // plan/fp8_time.h
    est.compute_model += hw.measured->gemm.count(plan::kFp8GemmElement) != 0
                             ? ", FP8 GEMMs from its FP8 table"
                             : ", FP8 GEMMs at its bf16 times x the datasheet's bf16/FP8 ratio (no FP8 table)";
  est.mfu = est.flops_per_step / (est.world * hw.peak_flops(spec.train.precision) * est.step_time_s);

  // Offloaded optimizer state and async checkpoints' copies: a node's ranks share its RAM
  // (cluster.host_memory_gb, when given). On CPU ranks that RAM is their device, and the memory
  // limit below counts them with the rest.
  const RankEstimate* most_host = nullptr;
  for (const RankEstimate& r : est.ranks)
    if (most_host == nullptr || r.memory.host_total() > most_host->memory.host_total()) most_host = &r;
  est.host_memory_bytes = most_host == nullptr ? 0.0 : most_host->memory.host_total();
  est.node_host_memory_bytes = node_host_bytes(spec, {0, 0, 0, 0, 0, est.host_memory_bytes});
  const double host_limit = spec.cluster.host_memory_gb * 1e9;
  if (host_limit > 0 && !hw.device_is_host() && est.node_host_memory_bytes > host_limit) {
    const MemoryBreakdown& m = most_host->memory;
    const std::string host_parts =
        (m.host > 0 ? "offloaded optimizer state " + gib(m.host) + " (fp32 master weights, m, v and a gradient copy)"
                    : std::string()) +
        (m.host > 0 && m.checkpoint_copy > 0 ? ", " : "") +
        (m.checkpoint_copy > 0 ? "async checkpoint copy " + gib(m.checkpoint_copy) : "");
    est.diags.errors.push_back(job.at(
        "cluster.host_memory_gb",
        "the host memory of a node's " + std::to_string(std::min(spec.cluster.gpus_per_node, spec.world)) +
            " ranks, " + gib(est.node_host_memory_bytes) + " (" + gib(est.host_memory_bytes) + " per rank: " + host_parts +
            "), exceeds its " + gb(host_limit) + " of RAM",
        "use a higher parallel.zero (it shards the state over dp*cp), more nodes" +
            std::string(m.host > 0 ? ", offload: none" : "") + (m.checkpoint_copy > 0 ? ", checkpoint.async: false" : "")));
  }

  est.memory_limit = memory_limit(spec, hw);
  const RankEstimate* most = &est.heaviest();  // against the limit (on a host, offloaded state too)
  for (const RankEstimate& r : est.ranks)
    if (est.memory_limit.rank_bytes(r.memory) > est.memory_limit.rank_bytes(most->memory)) most = &r;
  est.memory_limit_used_bytes = est.memory_limit.shared_bytes(most->memory);
  if (est.memory_limit_used_bytes > est.memory_limit.bytes) {
    const std::optional<FittingLayout> fit = nearest_fitting_layout(job, hw);
    if (fit) est.nearest_fit = fit->set_line();
    est.diags.errors.push_back(over_memory(job, hw, est, *most, fit));
  }
  return est;
}

}  // namespace ptrain::plan
