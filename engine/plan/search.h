// `ptrain plan`: the layout search. Every combination of
//   tp        1, 2, 4, ... up to a node (cluster.gpus_per_node), so tensor parallelism stays on NVLink
//   cp        1, 2, 4, ... 16; with cp > 1 each cp_comm (allgather, ring, a2a where the heads split)
//   pp        1, 2, 4, ... up to model.layers
//   schedule  1f1b; with pp > 1 also zb-h1, interleaved-1f1b with 2 and 4 virtual stages, zbv and
//             dualpipev (gpipe is left out: 1f1b has its bubble with fewer microbatches in flight)
//   ep        every divisor of model.moe.experts (MoE models; 1 otherwise)
//   micro_batch 1, 2, 4, ... up to global_batch / dp
//   zero      0..3 where ranks shard (dp*cp or the expert dp group > 1; else 0)
//   precision the job's fp32 (asked for, kept); else bf16, and fp8 beside it wherever `ptrain run`
//             would execute it (plan/fp8_refusal.h: the device, the engine's limits, cuBLASLt's shapes)
// with dp = world / (tp*cp*pp), is derived from the job with config::rederive, so it passes or
// fails exactly the rules `validate` applies. When pp*virtual_stages does not divide the layers,
// the layers are spread as evenly as possible, the first and last stages (which also hold the
// embedding and the head) taking the smaller share.
//
// Of train.recompute only the least that fits is kept (none, selective, full): more recompute is
// never faster. A 1f1b or interleaved-1f1b layout that does not fit with a recompute is tried under
// caps on its microbatches in flight too (schedule.max_in_flight: 3/4, 1/2 of what it holds, the
// least; fit.h), the largest that fits kept beside the next recompute's. A layout fits when
// plan::peak_memory is within its memory limit (memory_limit.h: the device's; CPU ranks share their
// host's). The fitting ones are ranked by the full estimate's step time (the same numbers
// `validate` prints), then by communication volume, then by peak memory. The search first computes
// each layout's pipeline makespan plus the step tail (step_time.h) of the first rank of every
// stage: a lower bound of the step time, which is a maximum over all ranks, and equal to it where
// the ranks of a stage hold the same (dense models). Layouts are estimated in full in order of that
// bound until it passes the slowest of the `top` best, so the ranking is exact without estimating
// every layout.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/engine_limits.h"
#include "engine/config/job_spec.h"
#include "engine/config/loader.h"
#include "engine/plan/estimate.h"
#include "engine/plan/hardware.h"
#include "engine/plan/memory.h"

namespace ptrain::plan {

struct Layout {
  int tp = 1, cp = 1, pp = 1, ep = 1;
  config::ScheduleKind schedule = config::ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  std::vector<int> layers_per_stage;  // empty: split evenly
  int micro_batch = 1;
  bool sequence_parallel = false;  // the job's choice where tp > 1 (it does nothing at tp 1)
  config::Recompute recompute = config::Recompute::None;
  int zero = 0;
  config::CpComm cp_comm = config::CpComm::Allgather;
  int max_in_flight = 0;  // schedule.max_in_flight; 0: none
  config::Precision precision = config::Precision::Bf16;  // train.precision
};

// `spec` with `layout`'s values and dp: auto (derived fields are not recomputed: see rederive).
config::JobSpec with_layout(config::JobSpec spec, const Layout& layout);

// The job keys that set `layout`, as --set assignments ("parallel.tp=4", "parallel.dp=auto",
// "schedule.layers_per_stage=null", ..., "train.precision=fp8"); parallel.ep only for models with experts.
std::vector<std::string> layout_assignments(const Layout& layout, bool experts);

struct RankedLayout {
  Layout layout;
  config::LoadResult job;  // the job with this layout, derived
  Estimate estimate;
  double bound_s = 0;  // what the search ordered it by: <= estimate.step_time_s
};

struct SearchResult {
  std::vector<RankedLayout> best;  // fastest first, at most `top`
  int layouts = 0;                 // layouts looked at (every recompute counted once, each precision apart)
  int invalid = 0;                 // broke one of validate's rules
  int over_memory = 0;             // exceed the device's memory even with full recompute
  int fitting = 0;
  int estimated = 0;  // of the fitting ones, estimated in full (the rest were bounded out)
  // The layout with the least peak memory when nothing fits (for the error), and that memory.
  std::optional<Layout> least_memory;
  double least_memory_bytes = 0;
  // The first problem of the first layout that broke a rule, for the error when none fits.
  std::optional<config::Diagnostic> first_rule_broken;
  // Layouts (of a bf16 or fp8 job) that passed the rules in bf16 and were not tried in fp8, since
  // `ptrain run` would refuse them in fp8, and the first one's reason (fp8_refusal.h).
  int fp8_refused = 0;
  std::optional<config::EngineLimit> first_fp8_refusal;
};

// Where a search stands, for a caller that shows the progress of a long one (plan on many GPUs
// takes seconds): SearchResult's counts so far, and the candidates once the ranking has begun.
// This room counts; the caller decides whether, when and where to say so (it does no I/O).
struct SearchProgress {
  int layouts = 0, fitting = 0, over_memory = 0, invalid = 0;
  bool ranking = false;  // every layout looked at; estimating the fitting ones in full
  int estimated = 0;     // of `candidates`, estimated in full so far
  int candidates = 0;    // the fitting layouts, each ZeRO stage counted (the ranking stops early)
};
using SearchProgressCallback = std::function<void(const SearchProgress&)>;

// `job`: read with LoadOptions::derive = false and no errors, with spec.world set to the number
// of GPUs; its own layout keys are ignored. `top` >= 1. `progress`, if given, is called after each
// layout looked at and after each full estimate.
SearchResult search_layouts(const config::LoadResult& job, const HardwareProfile& hw, int top,
                            const SearchProgressCallback& progress = {});

}  // namespace ptrain::plan
