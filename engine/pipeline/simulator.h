// Runs a schedule's instruction lists with per-op costs: makespan, bubble per rank, and the
// peak number of in-flight microbatches (forward done, backward not yet) per rank.
#pragma once

#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline {

struct OpCosts {
  // Seconds per op of one microbatch on one virtual stage, indexed by virtual stage
  // (chunk*pp + pp_rank). Backward excludes the weight grad when the schedule splits W;
  // when it does not, the executor runs W inside B and the simulator charges backward+weight_grad.
  std::vector<double> forward, backward, weight_grad;
  double p2p_seconds = 0.0;  // latency+transfer of one activation/grad message between stages

  // Same cost on every virtual stage.
  static OpCosts uniform(const Schedule& s, double forward, double backward, double weight_grad, double p2p = 0.0);
};

struct Span {  // one compute op on one rank's timeline
  Op op;
  int microbatch;
  int chunk;
  double start, end;
};

struct SimResult {
  double makespan = 0.0;
  std::vector<double> busy;            // per rank: seconds of compute
  std::vector<double> bubble_fraction; // per rank: 1 - busy/makespan
  double bubble_fraction_max = 0.0;    // the worst rank
  std::vector<double> peak_inflight;   // per rank, in microbatches of a full stage (chunks / vpp)
  double peak_inflight_max = 0.0;
  std::vector<std::vector<Span>> timeline;  // per rank, in time order
};

// Precondition: check(schedule) is empty.
SimResult simulate(const Schedule& schedule, const OpCosts& costs);

}  // namespace ptrain::pipeline
