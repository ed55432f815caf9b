#include "engine/plan/compute_time.h"

#include <algorithm>
#include <cmath>

#include "engine/plan/fp8_time.h"

namespace ptrain::plan {
namespace {

// Adds `seconds` to the part of `to` the op's kind belongs to.
void add(ComputeSeconds& to, model::OpKind kind, double seconds) {
  if (kind == model::OpKind::Gemm)
    to.gemm += seconds;
  else if (kind == model::OpKind::Attention)
    to.attention += seconds;
  else
    to.memory += seconds;
}

bool drops_under_selective(const model::Op& op) {
  return std::any_of(op.saves.begin(), op.saves.end(), [](const model::SavedTensor& t) { return t.recomputable; });
}

// One pass over `ops`: forward, input gradients, weight gradients, and the forward of the ops
// selective recompute redoes.
struct ListTimes {
  ComputeSeconds forward, input_grad, weight_grad, selective;
};
ListTimes list_times(const config::JobSpec& spec, const std::vector<model::Op>& ops, const MeasuredProfile& profile,
                     bool bf16) {
  ListTimes t;
  for (const model::Op& op : ops) {
    const OpSeconds s = op.fp8 ? fp8_op_seconds(spec, profile, op) : op_seconds(profile, op, bf16);
    add(t.forward, op.kind, s.forward);
    add(t.input_grad, op.kind, s.input_grad);
    add(t.weight_grad, op.kind, s.weight_grad);
    if (drops_under_selective(op)) add(t.selective, op.kind, s.forward);
  }
  return t;
}

}  // namespace

ComputeSeconds& ComputeSeconds::operator+=(const ComputeSeconds& o) {
  gemm += o.gemm, attention += o.attention, memory += o.memory;
  return *this;
}

double rank_slowdown(const config::JobSpec& spec, const MeasuredProfile& profile) {
  if (profile.backend != "cpu") return 1.0;
  const double ranks = std::max(1, std::min(spec.world, spec.cluster.gpus_per_node));
  const double threads = std::max(1.0, std::floor(profile.cores / ranks));
  return profile.threads / threads * std::max(1.0, ranks * threads / profile.cores);
}

ComputeSeconds operator*(double times, const ComputeSeconds& c) {
  return {times * c.gemm, times * c.attention, times * c.memory};
}

StageCompute stage_compute(const config::JobSpec& spec, const model::ModelOps& ops, const MeasuredProfile& profile,
                           int virtual_stage, int layers) {
  const bool bf16 = config::bf16_working(spec.train.precision);
  const int last_stage = spec.parallel.pp * spec.schedule.virtual_stages - 1;
  const double slowdown =
      rank_slowdown(spec, profile) * (profile.calibration ? profile.calibration->compute_scale : 1.0);
  const ListTimes layer = list_times(spec, ops.layer, profile, bf16);
  ComputeSeconds redone;  // what recompute runs again before a layer's backward
  if (spec.train.recompute == config::Recompute::Full) redone = layer.forward;
  if (spec.train.recompute == config::Recompute::Selective) redone = layer.selective;
  const bool split = config::splits_weight_grad(spec.schedule.kind);
  StageCompute c;
  c.forward = layers * layer.forward;
  c.backward = layers * layer.input_grad;
  c.backward += layers * redone;
  c.weight_grad = layers * layer.weight_grad;
  if (split) c.weight_grad += layers * redone;  // W rebuilds the dropped inputs once more
  for (const auto* ends : {virtual_stage == 0 ? &ops.embedding : nullptr, virtual_stage == last_stage ? &ops.head : nullptr}) {
    if (ends == nullptr) continue;
    const ListTimes t = list_times(spec, *ends, profile, bf16);
    c.forward += t.forward;
    c.backward += t.input_grad;
    c.weight_grad += t.weight_grad;
  }
  return {slowdown * c.forward, slowdown * c.backward, slowdown * c.weight_grad};
}

}  // namespace ptrain::plan
