// The dry-run model of a job: parameters, memory per rank, FLOPs, communication per link tier,
// pipeline bubble from simulating the real schedule, step time and MFU. Pure: no devices, no I/O.
// Every formula is documented next to its code (memory.h, flops.h, traffic.h, step_time.h, fit.h,
// model/layer_description.h) and in docs/validate.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/config/diagnostics.h"
#include "engine/config/loader.h"
#include "engine/grid/rank_grid.h"
#include "engine/model/layer_description.h"
#include "engine/plan/hardware.h"
#include "engine/plan/memory.h"
#include "engine/plan/memory_limit.h"

namespace ptrain::plan {

struct TensorCount {  // one registry tensor: global and per-rank element counts
  std::string name;
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> local_shape;  // on the rank holding it (tp/ep slice)
};

struct RankEstimate {
  int rank = 0;
  int pp_rank = 0, tp_rank = 0, ep_rank = 0;
  std::int64_t params = 0;  // elements held by this rank (before ZeRO sharding)
  MemoryBreakdown memory;
  double peak_inflight = 0;  // microbatches of a full stage whose activations the rank keeps at most
};

struct CommVolume {  // bytes one rank sends per step on one axis, by link tier
  double intra_node = 0, inter_node = 0;
  double total() const { return intra_node + inter_node; }
};

struct Estimate {
  int world = 0;
  grid::Degrees degrees;
  std::map<std::string, grid::GroupList> groups;  // "tp","pp","dp","cp","ep" -> rank lists
  std::int64_t params_total = 0;
  std::int64_t params_active = 0;    // per token (MoE: top_k experts)
  std::vector<TensorCount> tensors;  // every registry tensor, in registry order
  std::vector<RankEstimate> ranks;   // one per distinct (pp, tp, ep) position; all ranks share one of these
  int max_memory_rank = 0;           // index into ranks with the largest total
  std::vector<model::SavedTensor> layer_activations;  // what one layer keeps per microbatch (train.recompute)
  int microbatches = 0;
  // The simulated pipeline's bubble (pipeline/simulator.h: the idle share of the pp rank computing
  // most, the critical rank) and that rank.
  double bubble_fraction = 0;
  int bubble_rank = 0;
  std::vector<double> idle_fraction;  // per pp rank: its idle share of the simulated pipeline
  double peak_inflight = 0;    // worst pp rank
  // schedule.max_in_flight where it changed the schedule's order (pipeline::Schedule::max_in_flight),
  // else 0.
  int max_in_flight = 0;
  double tokens_per_step = 0;
  double flops_per_step = 0;           // model FLOPs (no recompute), whole job
  double hardware_flops_per_step = 0;  // including recompute
  std::map<std::string, CommVolume>
      comm_bytes_per_step;  // "tp","pp","dp","cp","ep": the rank sending the most
  double step_time_s = 0;   // pipeline_s + the slowest rank's tp_grads + dp_exposed + optimizer
  double pipeline_s = 0;    // simulated makespan of the schedule
  // Sequence parallelism's norm-gradient sums over tp at the step's end, one blocking call a tensor
  // (traffic.h: sequence_parallel_grad_reductions); counted in the breakdown's tp.
  double tp_grads_s = 0;
  double dp_exposed_s = 0;  // data-parallel communication not hidden behind backward
  double optimizer_s = 0;
  // Where the step goes on the pipeline's critical rank (bubble_rank): its compute by kind, its
  // blocking collectives per axis, its bubble (the pipeline messages' latency is in it: a send
  // costs its sender nothing), then the step's tail. The parts add up to step_time_s, and
  // bubble_s = bubble_fraction * pipeline_s.
  struct StepBreakdown {
    double gemm_s = 0, attention_s = 0, memory_bound_s = 0;
    double tp_s = 0, cp_s = 0, ep_s = 0, dp_s = 0;
    double bubble_s = 0, optimizer_s = 0;
  } breakdown;
  std::string compute_model;  // "profile <device, date>" or "peak x efficiency"
  std::string expected_error;  // how far that model's step times held against runs (plan::expected_error)
  double mfu = 0;
  double device_memory_bytes = 0;
  // parallel.offload: the host bytes of the rank with the most, and of a node (its ranks').
  double host_memory_bytes = 0, node_host_memory_bytes = 0;
  // What the ranks sharing a device (one each) or a CPU host (a node's) may hold together, and what
  // they hold: the rank with the most against it, times the ranks. Over the limit is an error.
  MemoryLimit memory_limit;
  double memory_limit_used_bytes = 0;
  std::string hardware;
  std::string nearest_fit;  // over memory: "--set ..." of the nearest layout that fits ("" if none)
  config::Diagnostics
      diags;  // over-memory error (with the breakdown and the nearest layout that fits), warnings

  const RankEstimate& heaviest() const { return ranks[static_cast<size_t>(max_memory_rank)]; }
  double peak_memory_bytes() const { return heaviest().memory.total(); }
};

// Precondition: job.ok() (every derived field of job.spec filled). Diagnostics are located in the
// job's YAML through job.at(...).
Estimate estimate(const config::LoadResult& job, const HardwareProfile& hw);

}  // namespace ptrain::plan
