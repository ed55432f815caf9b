// The traffic model (what validate predicts, not the communicator: that is comm/comm.h). Communication
// volume: the bytes one rank sends, by collective, with ring algorithms (NCCL's
// bandwidth-optimal ones) on a group of n ranks and a buffer of S bytes:
//   all-reduce 2(n-1)/n * S;  all-gather, reduce-scatter (n-1)/n * S (S = the full, gathered size);
//   all-to-all (n-1)/n * S (S = this rank's send buffer);  send/recv S.
// Time of one collective = bytes sent / per-GPU link bandwidth + one link latency; within a node,
// what a measured profile's collective table says when the hardware carries one
// (measured_profile.h: collective_seconds).
//
// What each parallelism moves (the collectives of tp, cp and ep are the layer description's,
// model/layer_description.h; this is what they add up to), with s = seq_len/cp, b = micro_batch, h = hidden, t = tp, m =
// microbatches per step and the activation dtype (gradients travel in it too):
//   tp  per layer per microbatch, forward: 2 all-reduces of sbh (attention and MLP outputs), or
//       with sequence parallelism 2 all-gathers + 2 reduce-scatters of sbh (Korthikanti et al.
//       2022); backward the same again, and once more for the forward redone under full
//       recompute. The vocab-parallel embedding adds a forward all-reduce (SP: reduce-scatter) of
//       sbh and under SP a backward all-gather; the LM head under SP a forward all-gather and a
//       backward reduce-scatter of sbh (without SP a backward all-reduce), and the
//       cross-entropy 3 fp32 all-reduces of s*b (max, sum of exp, target logit).
//   cp  ring attention, per layer per microbatch: the local K and V go around the ring cp-1
//       times forward; K, V, dK, dV backward (and the forward again under full recompute).
//   ep  per MoE layer per microbatch: all-to-all dispatch and combine of the rank's routed tokens
//       (tokens/t * top_k * h) forward, and the same backward (+ forward again, full recompute).
//   pp  per microbatch per model chunk: the activation to the next virtual stage (forward) and
//       the gradient to the previous one (backward), sbh/t under SP else sbh; with a tied word
//       embedding and pp > 1 the first and last stage all-reduce its gradient once per step.
//   dp  once per step over dp-cp for dense params (Psi_d elements here) and over expert-dp for
//       experts: zero 0 all-reduce of the grads; zero 1/2 reduce-scatter of the grads + all-gather
//       of the updated params; zero 3 reduce-scatter of the grads + all-gather of the params in
//       forward and again in backward (Rajbhandari et al. 2020, "ZeRO").
#pragma once

#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/layer_description.h"
#include "engine/plan/hardware.h"
#include "engine/plan/rank_params.h"

namespace ptrain::plan {

using CollectiveKind = model::CollectiveKind;

struct Collective {
  CollectiveKind kind = CollectiveKind::AllReduce;
  double bytes = 0;  // S, see above
  int ranks = 1;     // group size n
  double count = 1;  // how many times it runs
};

double bytes_sent(const Collective& c);  // per rank, all `count` runs
double bytes_sent(const std::vector<Collective>& list);
double seconds(const Collective& c, const HardwareProfile& hw, bool inter_node);
double seconds(const std::vector<Collective>& list, const HardwareProfile& hw, bool inter_node);

// One microbatch through one virtual stage holding `layers` transformer layers, on one rank.
// Backward lists include the forward redone under full recompute.
struct StageTraffic {
  std::vector<Collective> tp_forward, tp_backward;
  std::vector<Collective> cp_forward, cp_backward;
  std::vector<Collective> ep_forward, ep_backward;
};
StageTraffic stage_traffic(const config::JobSpec& spec, const model::ModelOps& ops, int virtual_stage, int layers);
inline StageTraffic stage_traffic(const config::JobSpec& spec, int virtual_stage, int layers) {
  return stage_traffic(spec, model::model_ops(spec), virtual_stage, layers);
}

// Sequence parallelism: the norms' (and MoE routers') weight gradients are partial sums over the tp
// ranks' tokens, all-reduced over tp before the data-parallel reduction (zero/data_parallel.cpp), one
// call per tensor: once per step, or per microbatch under ZeRO 2/3, which reduce every microbatch.
// On a host transport each call costs its latency (a 4-layer GPT-2 makes 18 a step). For the chunk
// at `virtual_stage` holding `layers` layers; empty without SP.
std::vector<Collective> sequence_parallel_grad_reductions(const config::JobSpec& spec, int virtual_stage,
                                                          int layers);

// The activation (or its gradient) sent between pipeline stages for one microbatch.
Collective pipeline_message(const config::JobSpec& spec);

// Per step, dense params over dp-cp and experts over expert-dp; each list is empty when its group
// has one rank. Gradients are reduced once per step after the last microbatch's backward (zero 0,
// 1) or after every microbatch's backward (zero 2, 3, which keep no full gradient buffer). As the
// engine does (zero/data_parallel.h), the reduction and the zero 1/2 param all-gather are one
// collective per unit of the flat buffer (count = units, bytes = their mean size): a call's
// latency is paid per unit, which is what a small model on a host transport spends most on.
struct ZeroComm {
  std::vector<Collective> grad_reduction;           // all-reduce (zero 0) or reduce-scatter
  std::vector<Collective> param_gather_after_step;  // zero 1/2
  std::vector<Collective> param_gather_zero3;       // zero 3: the units the engine gathers (zero3_gathers.h)
};
struct DataParallelTraffic {
  ZeroComm dense, expert;
};
DataParallelTraffic data_parallel_traffic(const config::JobSpec& spec, const RankParams& params);

struct StepTraffic {  // bytes one rank at `pp_rank` sends per step, by axis
  double tp = 0, cp = 0, ep = 0;
  double pp = 0;                       // activations/grads + the tied-embedding all-reduce
  // (each axis also carries the gradient norm's all-reduce of one double)
  double dp_dense = 0, dp_expert = 0;  // over dp-cp and over expert-dp
};
StepTraffic step_traffic(const config::JobSpec& spec, const RankParams& params, int pp_rank);

}  // namespace ptrain::plan
