// Runs a schedule's instruction lists with per-op costs: makespan, bubble per rank, and the
// peak number of in-flight microbatches (forward done, backward not yet) per rank.
//
// Execution model (discrete events, the same contract check() proves deadlock-free):
//  - each rank runs its list in order, one compute op at a time;
//  - a send takes no time on its rank; its message arrives p2p_seconds after the send is issued
//    (i.e. after the F or B before it ended);
//  - a receive takes no time; it holds its rank until the message has arrived;
//  - a compute op starts when its rank is free (and hence after the receive before it);
//  - an F&B pair (schedule.h) runs as its ops one after the other, unless costs.forward_backward
//    is given: then as DualPipe runs it, one op of that cost that starts once its rank is free and
//    all its receives have arrived, and whose sends leave when it ends. Its F, B (and W) are drawn
//    side by side within it, in proportion to their own costs.
// Definitions (all times in seconds, from 0 = the first op's start):
//  - makespan: the end of the last op on any rank;
//  - busy[r]: total compute time of rank r; idle_fraction[r] = 1 - busy[r] / makespan, the share
//    of the pipeline rank r does not compute, the drain after its last op included;
//  - bubble: that of the critical rank (Bubble below);
//  - peak_inflight[r]: max over time of #(mb, chunk) on rank r with F done and B not yet done,
//    divided by vpp (so a full stage's worth of activations counts 1);
//  - peak_live[r]: the same with W in place of B (F done, weight grad not yet done): what the
//    rank must keep for W when the schedule splits it; equal to peak_inflight otherwise.
#pragma once

#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline {

struct OpCosts {
  // Seconds per op of one microbatch on one virtual stage, indexed by virtual stage
  // (chunk*pp + pp_rank). Backward excludes the weight grad when the schedule splits W;
  // when it does not, the executor runs W inside B and the simulator charges backward+weight_grad.
  std::vector<double> forward, backward, weight_grad;
  // DualPipe's F&B: seconds of an F&B pair run overlapped (the F and the B it pairs with, and that
  // B's W when it follows at once, i.e. the whole backward), indexed by the virtual stage of the
  // pair's F. Empty: pairs run as ptrain's executor runs them, F then B, each message leaving
  // after its own op. F + B + W here is DualPipe's F&B with nothing overlapped; the overlap it
  // gains needs the pair's two ops to run at once (two streams), which ptrain's executor does not.
  std::vector<double> forward_backward;
  double p2p_seconds = 0.0;  // latency+transfer of one activation/grad message between stages

  // Same cost on every virtual stage.
  static OpCosts uniform(const Schedule& s, double forward, double backward, double weight_grad,
                         double p2p = 0.0);
};

// The pipeline bubble, the one definition that validate, plan, schedule, run and report share: the
// time the critical rank -- the one with the most compute (busy; the lowest of equals) -- spends in
// the step's pipeline not computing, makespan - busy[rank]. That is its waits for inputs while the
// pipeline fills, for messages in flight (a send costs its sender nothing; the latency is time its
// receiver waits) and for the other ranks while it drains. Why that rank and not the idlest or the
// mean: the pipeline's makespan is exactly its compute plus its bubble, so the bubble is what the
// schedule adds to the step; a lighter rank's idle time also holds the imbalance of the layer split,
// which no schedule removes (each rank's share is idle_fraction).
struct Bubble {
  int rank = 0;         // the critical rank
  double seconds = 0;   // makespan - busy[rank]
  double fraction = 0;  // seconds / makespan; 0 for an empty pipeline
};

// The bubble of ranks that computed `busy` seconds each in a pipeline of `makespan` seconds, simulated
// or measured (train/step_accounting.h).
Bubble bubble_of(const std::vector<double>& busy, double makespan);

struct Span {  // one compute op on one rank's timeline
  Op op;
  int microbatch;
  int chunk;
  double start, end;
  bool overlapped = false;  // part of an F&B pair: its F, its B, or that B's W
};

struct SimResult {
  double makespan = 0.0;
  std::vector<double> busy;             // per rank: seconds of compute
  std::vector<double> idle_fraction;    // per rank: 1 - busy/makespan
  Bubble bubble;                        // the critical rank's
  std::vector<double> peak_inflight;    // per rank, in microbatches of a full stage (chunks / vpp)
  double peak_inflight_max = 0.0;
  std::vector<double> peak_live;  // per rank, like peak_inflight but until W (see above)
  double peak_live_max = 0.0;
  std::vector<std::vector<Span>> timeline;  // per rank, in time order (empty lists: Timeline::Drop)
  bool pairs_as_one_op = false;             // F&B pairs timed as one op (costs.forward_backward)
};

// Drop: no spans (the pp lists stay empty), for the callers that read the numbers only (validate's
// estimate, plan's search over thousands of layouts); Keep: for the renderings.
enum class Timeline { Keep, Drop };

// Fills `sim`'s idle_fraction and bubble from its busy and makespan.
void account_idle(SimResult& sim);

// Per rank, per instruction of its list: a send's issue time, else the rank's clock once the
// instruction (or the F&B pair it belongs to, timed as one op) has run; and the rank's compute time
// by then. With the sends' issue times the clocks are the state of the run between any two
// instructions (schedule_model.h reads it at a cut).
struct InstructionTimes {
  std::vector<std::vector<double>> clock, busy;
};

// Precondition: check(schedule) is empty, and every cost vector has pp*vpp entries
// (forward_backward: that or none). `times`, if given, receives InstructionTimes.
SimResult simulate(const Schedule& schedule, const OpCosts& costs, Timeline timeline = Timeline::Keep,
                   InstructionTimes* times = nullptr);

}  // namespace ptrain::pipeline
