#include "engine/plan/traffic.h"

#include <algorithm>
#include <cmath>

#include "engine/model/layer_description.h"
#include "engine/config/stage_placement.h"
#include "engine/plan/dtypes.h"

namespace ptrain::plan {
namespace {

constexpr double kFp32 = 4;

// The sizes of one microbatch's messages on one rank.
struct Messages {
  double hidden;    // s*b*h activations: what tp collectives and (full-size) p2p move
  double pipeline;  // sbh, /t under SP

  explicit Messages(const config::JobSpec& spec) {
    const config::ModelSpec& m = spec.model;
    const double act = bytes_per_element(spec.train.precision).activation;
    const double tokens = static_cast<double>(spec.train.micro_batch) * m.seq_len / spec.parallel.cp;
    hidden = tokens * m.hidden * act;
    pipeline = spec.parallel.sequence_parallel ? hidden / spec.parallel.tp : hidden;
  }
};

double zero_bytes_sent(const ZeroComm& z) {
  return bytes_sent(z.grad_reduction) + bytes_sent(z.param_gather_after_step) +
         bytes_sent(z.param_gather_zero3);
}

// Adds the collectives `ops` run on `axis` in forward or backward, `times` over (layers, or one for
// the model's ends); a collective already in the list counts once more.
void add_collectives(std::vector<Collective>& to, const std::vector<model::Op>& ops, model::Axis axis,
                     bool backward, double times) {
  if (times == 0) return;
  for (const model::Op& op : ops) {
    if (op.kind != model::OpKind::Collective || op.collective.axis != axis) continue;
    const model::CollectiveStep& step = op.collective;
    for (CollectiveKind kind : backward ? step.backward : step.forward) {
      auto same = std::find_if(to.begin(), to.end(), [&](const Collective& c) {
        return c.kind == kind && c.bytes == step.bytes && c.ranks == step.ranks;
      });
      if (same != to.end())
        same->count += times;
      else
        to.push_back({kind, step.bytes, step.ranks, times});
    }
  }
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
  if (hw.measured && !inter_node)
    if (const std::optional<double> one = collective_seconds(*hw.measured, c.kind, c.ranks, c.bytes))
      return c.count * *one;
  return bytes_sent(c) / hw.link_bytes_per_s(inter_node) + c.count * hw.link_latency_s(inter_node);
}

double seconds(const std::vector<Collective>& list, const HardwareProfile& hw, bool inter_node) {
  double sum = 0;
  for (const Collective& c : list) sum += seconds(c, hw, inter_node);
  return sum;
}

StageTraffic stage_traffic(const config::JobSpec& spec, const model::ModelOps& ops, int virtual_stage, int layers) {
  const Messages msg(spec);
  const int t = spec.parallel.tp;
  const bool sp = spec.parallel.sequence_parallel;
  const bool full = spec.train.recompute == config::Recompute::Full;
  const bool zb = config::splits_weight_grad(spec.schedule.kind);  // W runs apart (zb-h1, zbv, dualpipev)
  const int last_stage = spec.parallel.pp * spec.schedule.virtual_stages - 1;
  using model::Axis;
  // The collectives of the layer description (model/layer_description.h): the layers', and the
  // embedding's and the head's on the first and last virtual stage.
  const double embedding = virtual_stage == 0 ? 1 : 0, head = virtual_stage == last_stage ? 1 : 0;
  const std::vector<model::Op>& layer = ops.layer;
  StageTraffic c;
  auto add_axis = [&](std::vector<Collective>& forward, std::vector<Collective>& backward, Axis axis) {
    for (const bool backward_pass : {false, true}) {
      std::vector<Collective>& to = backward_pass ? backward : forward;
      add_collectives(to, layer, axis, backward_pass, layers);
      add_collectives(to, ops.embedding, axis, backward_pass, embedding);
      add_collectives(to, ops.head, axis, backward_pass, head);
    }
    // Full recompute runs each layer's forward again before its backward, and zb-h1's W once more.
    const double redone = full ? (zb ? 2.0 : 1.0) * layers : 0.0;
    add_collectives(backward, layer, axis, false, redone);
  };
  add_axis(c.tp_forward, c.tp_backward, Axis::Tp);
  add_axis(c.cp_forward, c.cp_backward, Axis::Cp);
  add_axis(c.ep_forward, c.ep_backward, Axis::Ep);
  // zb-h1's W: under SP each layer all-gathers its kept output gradients and its norm outputs again
  // (an MoE block keeps its output gradients whole: one gather fewer), the head its input.
  if (t > 1 && zb && sp) {
    const double gathers = spec.model.moe ? 3.0 : 4.0;
    if (layers > 0) c.tp_backward.push_back({CollectiveKind::AllGather, msg.hidden, t, gathers * layers});
    if (virtual_stage == last_stage) c.tp_backward.push_back({CollectiveKind::AllGather, msg.hidden, t});
  }
  return c;
}

std::vector<Collective> sequence_parallel_grad_reductions(const config::JobSpec& spec, int virtual_stage,
                                                          int layers) {
  const config::ParallelSpec& p = spec.parallel;
  if (p.tp == 1 || !p.sequence_parallel) return {};
  const config::ModelSpec& m = spec.model;
  const bool gpt2 = m.arch == config::Arch::Gpt2;  // LayerNorm: weight and bias
  const double times = p.zero >= 2 ? spec.train.microbatches : 1;
  double norms = layers * (gpt2 ? 4.0 : 2.0);
  if (virtual_stage == p.pp * spec.schedule.virtual_stages - 1) norms += gpt2 ? 2.0 : 1.0;
  std::vector<Collective> out;
  if (norms > 0) out.push_back({CollectiveKind::AllReduce, m.hidden * kFp32, p.tp, times * norms});
  if (m.moe && layers > 0)
    out.push_back({CollectiveKind::AllReduce, static_cast<double>(m.moe->experts) * m.hidden * kFp32, p.tp,
                   times * layers});
  return out;
}

Collective pipeline_message(const config::JobSpec& spec) {
  return {CollectiveKind::SendRecv, Messages(spec).pipeline, 2};
}

DataParallelTraffic data_parallel_traffic(const config::JobSpec& spec, const RankParams& params) {
  const BytesPerElement bytes = bytes_per_element(spec.train.precision);
  const int zero = spec.parallel.zero;
  const config::ParallelSpec& par = spec.parallel;
  auto zero_comm = [&](double elements, int units, int ranks) {
    ZeroComm z;
    if (ranks == 1 || elements == 0) return z;
    const double calls = std::max(1, units), unit = elements / calls;
    // Stages 2 and 3 keep no full gradient buffer: every microbatch's gradients are reduced.
    const double reductions = zero >= 2 ? calls * spec.train.microbatches : calls;
    z.grad_reduction = {{zero == 0 ? CollectiveKind::AllReduce : CollectiveKind::ReduceScatter,
                         unit * grad_reduce_bytes(spec.train), ranks, reductions}};
    if (zero == 1 || zero == 2)
      z.param_gather_after_step = {{CollectiveKind::AllGather, unit * bytes.param, ranks, calls}};
    return z;
  };
  DataParallelTraffic c{zero_comm(static_cast<double>(params.dense), params.dense_units, par.dp * par.cp),
                     zero_comm(static_cast<double>(params.expert), params.expert_units, par.expert_dp())};
  if (zero == 3) {
    // Units as the engine gathers them (zero3_gathers.h), the experts' over expert-dp.
    if (par.dp * par.cp > 1 && params.zero3_gather_calls > 0) {
      const double calls = static_cast<double>(params.zero3_gather_calls);
      c.dense.param_gather_zero3 = {{CollectiveKind::AllGather,
                                     static_cast<double>(params.zero3_gathered) * bytes.param / calls,
                                     par.dp * par.cp, calls}};
    }
    const int expert_ranks = par.expert_dp();
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
  const config::StagePlacement place = config::StagePlacement::of(spec);
  const double m = spec.train.microbatches;
  const double message = bytes_sent(pipeline_message(spec));
  const model::ModelOps ops = model::model_ops(spec);
  StepTraffic s;
  for (int chunk = 0; chunk < place.vpp; ++chunk) {
    const int v = place.virtual_stage(pp_rank, chunk);
    const StageTraffic c = stage_traffic(spec, ops, v, spec.schedule.resolved_layers_per_stage[static_cast<size_t>(v)]);
    s.tp += m * (bytes_sent(c.tp_forward) + bytes_sent(c.tp_backward)) +
            bytes_sent(sequence_parallel_grad_reductions(
                spec, v, spec.schedule.resolved_layers_per_stage[static_cast<size_t>(v)]));
    s.cp += m * (bytes_sent(c.cp_forward) + bytes_sent(c.cp_backward));
    s.ep += m * (bytes_sent(c.ep_forward) + bytes_sent(c.ep_backward));
    // Activation forward, grad backward; none to a neighbour on this rank (the V's turn).
    const int sends = (v + 1 < place.stages() && place.holder(v + 1).rank != pp_rank ? 1 : 0) +
                      (v > 0 && place.holder(v - 1).rank != pp_rank ? 1 : 0);
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
  // The gradient norm: the sum of squares (one double) all-reduced over dp-cp, tp and pp
  // (train/grad_norm.h).
  const config::ParallelSpec& par = spec.parallel;
  auto norm_sum = [](int ranks) { return ranks > 1 ? bytes_sent(Collective{CollectiveKind::AllReduce, 8, ranks}) : 0.0; };
  s.dp_dense += norm_sum(par.dp * par.cp);
  s.tp += norm_sum(par.tp);
  s.pp += norm_sum(par.pp);
  return s;
}

}  // namespace ptrain::plan
