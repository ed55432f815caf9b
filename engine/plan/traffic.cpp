#include "engine/plan/traffic.h"

#include <algorithm>
#include <cmath>

#include "engine/model/saved_activations.h"
#include "engine/plan/dtypes.h"
#include "kernels/op_constants.h"

namespace ptrain::plan {
namespace {

constexpr double kFp32 = 4;

// The sizes of one microbatch's messages on one rank.
struct Messages {
  double hidden;      // s*b*h activations: what tp collectives and (full-size) p2p move
  double pipeline;    // sbh, /t under SP
  double kv;          // K and V of this rank's tokens (under cp: its two chunks)
  double routed;      // the experts' slots * h: one all-to-all of an MoE layer (model/moe_block.h)
  double combine_weights;  // the MoE combine weights' gradients: top_k fp32 per token
  double loss_stats;  // one vocab shard's cross-entropy stats: fp32 per token

  explicit Messages(const config::JobSpec& spec) {
    const config::ModelSpec& m = spec.model;
    const double act = bytes_per_element(spec.train.precision).activation;
    const double tokens = static_cast<double>(spec.train.micro_batch) * m.seq_len / spec.parallel.cp;
    const int tp = spec.parallel.tp;
    const double local_kv_heads = std::max(m.kv_heads / tp, 1);
    hidden = tokens * m.hidden * act;
    pipeline = spec.parallel.sequence_parallel ? hidden / tp : hidden;
    kv = 2.0 * tokens * local_kv_heads * m.head_dim() * act;
    routed = static_cast<double>(model::expert_token_slots(spec)) * m.hidden * act;
    combine_weights = m.moe ? tokens * m.moe->top_k * kFp32 : 0.0;
    loss_stats = kernels::kCrossEntropyShardStats * tokens * kFp32;
  }
};

double zero_bytes_sent(const ZeroComm& z) {
  return bytes_sent(z.grad_reduction) + bytes_sent(z.param_gather_after_step) +
         bytes_sent(z.param_gather_zero3);
}

void append(std::vector<Collective>& to, const std::vector<Collective>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// Tensor-parallel collectives of `layers` layers' forward or backward: per layer two all-reduces
// (the output projections' partial sums; in backward the column-parallel input gradients), or under
// SP an all-gather before and a reduce-scatter after each pair of GEMMs, and in backward two more
// all-gathers: the column-parallel inputs again (kept sharded) and the row-parallel output
// gradients (Megatron; what model/transformer.cpp does).
std::vector<Collective> tp_layers(const config::JobSpec& spec, const Messages& msg, int layers,
                                  bool backward) {
  const int t = spec.parallel.tp;
  if (t == 1 || layers == 0) return {};
  if (spec.parallel.sequence_parallel) {
    return {{CollectiveKind::AllGather, msg.hidden, t, (backward ? 4.0 : 2.0) * layers},
            {CollectiveKind::ReduceScatter, msg.hidden, t, 2.0 * layers}};
  }
  return {{CollectiveKind::AllReduce, msg.hidden, t, 2.0 * layers}};
}

// Sequence parallelism: the norms' (and MoE routers') weight gradients are partial sums over the tp
// ranks' tokens, all-reduced over tp before the data-parallel reduction (parallel/data_parallel.cpp): once per
// step, or per microbatch under ZeRO 2/3, which reduce every microbatch.
double sequence_parallel_grad_bytes(const config::JobSpec& spec, int virtual_stage, int layers) {
  const config::ParallelSpec& p = spec.parallel;
  if (p.tp == 1 || !p.sequence_parallel) return 0;
  const config::ModelSpec& m = spec.model;
  const bool gpt2 = m.arch == config::Arch::Gpt2;  // LayerNorm: weight and bias
  double elements = layers * (gpt2 ? 4.0 : 2.0) * m.hidden;
  if (m.moe) elements += layers * static_cast<double>(m.moe->experts) * m.hidden;
  if (virtual_stage == p.pp * spec.schedule.virtual_stages - 1) elements += (gpt2 ? 2.0 : 1.0) * m.hidden;
  const double times = p.zero >= 2 ? spec.train.microbatches : 1;
  return times * bytes_sent(Collective{CollectiveKind::AllReduce, elements * kFp32, p.tp});
}

}  // namespace

double bytes_sent(const Collective& c) {
  const double n = c.ranks;
  double per_run = 0;
  switch (c.kind) {
    case CollectiveKind::AllReduce:
      per_run = 2.0 * (n - 1) / n * c.bytes;
      break;
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllToAll:
      per_run = (n - 1) / n * c.bytes;
      break;
    case CollectiveKind::SendRecv:
      per_run = c.bytes;
      break;
  }
  return per_run * c.count;
}

double bytes_sent(const std::vector<Collective>& list) {
  double sum = 0;
  for (const Collective& c : list) sum += bytes_sent(c);
  return sum;
}

double seconds(const Collective& c, const HardwareProfile& hw, bool inter_node) {
  return bytes_sent(c) / hw.link_bytes_per_s(inter_node) + c.count * hw.link_latency_s(inter_node);
}

double seconds(const std::vector<Collective>& list, const HardwareProfile& hw, bool inter_node) {
  double sum = 0;
  for (const Collective& c : list) sum += seconds(c, hw, inter_node);
  return sum;
}

StageTraffic stage_traffic(const config::JobSpec& spec, int virtual_stage, int layers) {
  const Messages msg(spec);
  const int t = spec.parallel.tp, cp = spec.parallel.cp, ep = spec.parallel.ep;
  const bool sp = spec.parallel.sequence_parallel;
  const bool full = spec.train.recompute == config::Recompute::Full;
  const int last_stage = spec.parallel.pp * spec.schedule.virtual_stages - 1;
  StageTraffic c;

  c.tp_forward = tp_layers(spec, msg, layers, false);
  c.tp_backward = tp_layers(spec, msg, layers, true);
  if (full) append(c.tp_backward, c.tp_forward);
  // kv heads replicated on t / kv_heads ranks: their k and v output gradients are summed over them.
  if (t > spec.model.kv_heads && layers > 0)
    c.tp_backward.push_back({CollectiveKind::AllReduce, msg.kv / 2, t / spec.model.kv_heads, 2.0 * layers});
  if (t > 1 && virtual_stage == 0) {  // vocab-parallel embedding
    c.tp_forward.push_back({sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, msg.hidden, t});
    if (sp) c.tp_backward.push_back({CollectiveKind::AllGather, msg.hidden, t});
  }
  // zb-h1's W: under SP each layer all-gathers its kept output gradients and its norm outputs again
  // (an MoE block keeps its output gradients whole: one gather fewer), the head its input; under full
  // recompute W first runs each layer's forward again.
  if (t > 1 && spec.schedule.kind == config::ScheduleKind::ZbH1) {
    const double gathers = spec.model.moe ? 3.0 : 4.0;
    if (sp && layers > 0)
      c.tp_backward.push_back({CollectiveKind::AllGather, msg.hidden, t, gathers * layers});
    if (sp && virtual_stage == last_stage)
      c.tp_backward.push_back({CollectiveKind::AllGather, msg.hidden, t});
    if (full) append(c.tp_backward, tp_layers(spec, msg, layers, false));
  }
  if (t > 1 && virtual_stage == last_stage) {  // LM head and vocab-parallel cross-entropy
    if (sp) c.tp_forward.push_back({CollectiveKind::AllGather, msg.hidden, t});
    c.tp_forward.push_back({CollectiveKind::AllGather, t * msg.loss_stats, t});   // every shard's
    if (sp) c.tp_backward.push_back({CollectiveKind::AllGather, msg.hidden, t});  // the head's input again
    c.tp_backward.push_back({sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, msg.hidden, t});
  }

  // Context parallelism (parallel/context_parallel.h): each layer all-gathers the sequence's k and v
  // in forward, and in backward gathers them again (full recompute's forward just did, and backward
  // uses those) and reduce-scatters their gradients; zb-h1's W re-runs forward under full recompute.
  if (cp > 1 && layers > 0) {
    const double sequence_kv = cp * msg.kv;
    c.cp_forward = {{CollectiveKind::AllGather, sequence_kv, cp, static_cast<double>(layers)}};
    c.cp_backward = {{CollectiveKind::AllGather, sequence_kv, cp, static_cast<double>(layers)},
                     {CollectiveKind::ReduceScatter, sequence_kv, cp, static_cast<double>(layers)}};
    if (full && spec.schedule.kind == config::ScheduleKind::ZbH1) append(c.cp_backward, c.cp_forward);
  }

  // Expert parallelism (model/moe_block.h): over the tp group (ep = tp), the MoE block's tokens are
  // the all-gathered ones the tp collectives above move, and backward sums the combine weights'
  // gradients; otherwise (the engine runs tp = 1), all-to-alls of the experts' slots over ep.
  const bool experts_over_tp = ep == t;
  if (ep > 1 && spec.model.moe && layers > 0 && experts_over_tp)
    c.tp_backward.push_back({CollectiveKind::AllReduce, msg.combine_weights, t, static_cast<double>(layers)});
  if (ep > 1 && spec.model.moe && layers > 0 && !experts_over_tp) {
    c.ep_forward = {{CollectiveKind::AllToAll, msg.routed, ep, 2.0 * layers}};  // dispatch + combine
    c.ep_backward = c.ep_forward;                                               // the gradients both ways
    if (full) append(c.ep_backward, c.ep_forward);
    if (full && spec.schedule.kind == config::ScheduleKind::ZbH1) append(c.ep_backward, c.ep_forward);
  }
  return c;
}

Collective pipeline_message(const config::JobSpec& spec) {
  return {CollectiveKind::SendRecv, Messages(spec).pipeline, 2};
}

DataParallelTraffic data_parallel_traffic(const config::JobSpec& spec, const RankParams& params) {
  const BytesPerElement bytes = bytes_per_element(spec.train.precision);
  const int zero = spec.parallel.zero;
  const config::ParallelSpec& par = spec.parallel;
  auto zero_comm = [&](double elements, int ranks) {
    ZeroComm z;
    if (ranks == 1 || elements == 0) return z;
    const double buckets = std::ceil(elements / kGradBucketElements);
    const double bucket = elements / buckets;
    // Stages 2 and 3 keep no full gradient buffer: every microbatch's gradients are reduced.
    const double reductions = zero >= 2 ? buckets * spec.train.microbatches : buckets;
    z.grad_reduction = {{zero == 0 ? CollectiveKind::AllReduce : CollectiveKind::ReduceScatter,
                         bucket * grad_reduce_bytes(spec.train), ranks, reductions}};
    if (zero == 1 || zero == 2)
      z.param_gather_after_step = {{CollectiveKind::AllGather, bucket * bytes.param, ranks, buckets}};
    return z;
  };
  DataParallelTraffic c{zero_comm(static_cast<double>(params.dense), par.dp * par.cp),
                     zero_comm(static_cast<double>(params.expert), par.tp * par.cp * par.dp / par.ep)};
  if (zero == 3) {
    // Units as the engine gathers them (zero3_gathers.h), the experts' over expert-dp.
    if (par.dp * par.cp > 1 && params.zero3_gather_calls > 0) {
      const double calls = static_cast<double>(params.zero3_gather_calls);
      c.dense.param_gather_zero3 = {{CollectiveKind::AllGather,
                                     static_cast<double>(params.zero3_gathered) * bytes.param / calls,
                                     par.dp * par.cp, calls}};
    }
    const int expert_ranks = par.tp * par.cp * par.dp / par.ep;
    if (expert_ranks > 1 && params.zero3_expert_gather_calls > 0) {
      const double calls = static_cast<double>(params.zero3_expert_gather_calls);
      c.expert.param_gather_zero3 = {{CollectiveKind::AllGather,
                                      static_cast<double>(params.zero3_expert_gathered) * bytes.param / calls,
                                      expert_ranks, calls}};
    }
  }
  return c;
}

StepTraffic step_traffic(const config::JobSpec& spec, const RankParams& params, int pp_rank) {
  const int pp = spec.parallel.pp, vpp = spec.schedule.virtual_stages;
  const double m = spec.train.microbatches;
  const double message = bytes_sent(pipeline_message(spec));
  StepTraffic s;
  for (int chunk = 0; chunk < vpp; ++chunk) {
    const int v = chunk * pp + pp_rank;
    const StageTraffic c = stage_traffic(spec, v, spec.schedule.resolved_layers_per_stage[static_cast<size_t>(v)]);
    s.tp += m * (bytes_sent(c.tp_forward) + bytes_sent(c.tp_backward)) +
            sequence_parallel_grad_bytes(spec, v,
                                         spec.schedule.resolved_layers_per_stage[static_cast<size_t>(v)]);
    s.cp += m * (bytes_sent(c.cp_forward) + bytes_sent(c.cp_backward));
    s.ep += m * (bytes_sent(c.ep_forward) + bytes_sent(c.ep_backward));
    const int sends = (v + 1 < pp * vpp ? 1 : 0) + (v > 0 ? 1 : 0);  // activation forward, grad backward
    s.pp += m * sends * message;
  }
  if (params.tied_embedding > 0) {
    const double grad =
        static_cast<double>(params.tied_embedding) * grad_reduce_bytes(spec.train);
    s.pp += bytes_sent(Collective{CollectiveKind::AllReduce, grad, 2});
  }
  const DataParallelTraffic dp = data_parallel_traffic(spec, params);
  s.dp_dense = zero_bytes_sent(dp.dense);
  s.dp_expert = zero_bytes_sent(dp.expert);
  return s;
}

}  // namespace ptrain::plan
