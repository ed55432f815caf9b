#include "engine/plan/fp8_time.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/plan/step_time.h"

namespace ptrain::plan {
namespace {

// The job's hardware's FP8 rate over bf16's (cluster.gpu; the rules accept only known names).
double bf16_over_fp8(const config::JobSpec& spec) {
  const HardwareProfile* hw = find_hardware(spec.cluster.gpu);
  if (hw == nullptr || hw->peak_flops_fp8 <= 0)
    throw std::invalid_argument("train.precision fp8 on cluster.gpu " + spec.cluster.gpu + ", which has no FP8 rate");
  return hw->peak_flops_bf16 / hw->peak_flops_fp8;
}

}  // namespace

Fp8CastBytes fp8_cast_bytes(const config::JobSpec& spec, const model::Op& op) {
  const double working = config::bf16_working(spec.train.precision) ? 2 : 4;
  // Read in the working dtype and written as codes; current scaling reads it once more for its amax
  // unless the amax is known (model::Op::fp8_*_amax_*).
  const double amax_read = spec.train.fp8.scaling == config::Fp8Scaling::Current ? working : 0;
  auto per_element = [&](bool amax_known) { return working + 1 + (amax_known ? 0 : amax_read); };
  const double m = static_cast<double>(op.gemm.m), n = static_cast<double>(op.gemm.n),
               k = static_cast<double>(op.gemm.k), calls = static_cast<double>(op.gemm.count);
  // A layer reading the previous one's input reads that layer's codes of it (model::SharedInput).
  const double input = op.fp8_input_shared ? 0 : m * k, weight = n * k, output_grad = m * n;
  // The output gradient's amax taken by the input gradient's part, kept for the weight gradient's.
  const double input_forward = per_element(op.fp8_input_amax_written) * input,
               input_weight_grad = per_element(op.fp8_amaxes_kept) * input,
               output_grad_cast = per_element(op.fp8_output_grad_amax_written) * output_grad,
               output_grad_weight_grad = per_element(op.fp8_amaxes_kept) * output_grad;
  if (model::keeps_fp8_weight_copies(spec)) {
    // Each weight cast once a step, both ways (model/fp8_weight_copies.h): its share of a microbatch's
    // forward (an MoE layer's calls read op.weights experts' weights, each cast once).
    const double weight_casts = static_cast<double>(op.weights) * (working + 2 + amax_read) * weight /
                                std::max(1, spec.train.microbatches);
    return {calls * input_forward + weight_casts, calls * output_grad_cast,
            calls * (output_grad_weight_grad + input_weight_grad)};
  }
  const double weight_cast = per_element(false) * weight;
  return {calls * (input_forward + weight_cast), calls * (output_grad_cast + weight_cast),
          calls * (output_grad_weight_grad + input_weight_grad)};
}

OpSeconds fp8_op_seconds(const config::JobSpec& spec, const MeasuredProfile& profile, const model::Op& op) {
  const bool measured = profile.gemm.count(kFp8GemmElement) != 0;
  const double ratio = measured ? 1.0 : bf16_over_fp8(spec);
  const OpSeconds gemm = gemm_op_seconds(profile, op, measured ? kFp8GemmElement : element_name(true));
  const Fp8CastBytes casts = fp8_cast_bytes(spec, op);
  const std::string table = std::string(memory_family(model::OpKind::Activation)) + "/" + element_name(true);
  auto cast_s = [&](double bytes) { return memory_seconds(profile, table, bytes, false); };
  return {ratio * gemm.forward + cast_s(casts.forward), ratio * gemm.input_grad + cast_s(casts.input_grad),
          ratio * gemm.weight_grad + cast_s(casts.weight_grad)};
}

StageCompute fp8_at_peak(const config::JobSpec& spec, const model::ModelOps& ops, const HardwareProfile& hw,
                         int layers) {
  if (hw.peak_flops_fp8 <= 0)
    throw std::invalid_argument("train.precision fp8 on " + hw.name + ", which has no FP8 rate");
  // Seconds a FLOP of an FP8 GEMM saves (or costs) against the working dtype's rate.
  const double per_flop = 1.0 / (hw.peak_flops_fp8 * kGemmEfficiency) -
                          1.0 / (hw.peak_flops(spec.train.precision) * kGemmEfficiency);
  StageCompute layer;
  for (const model::Op& op : ops.layer) {
    if (!op.fp8) continue;
    const double flops = op.gemm.forward_flops();  // each of forward, input and weight gradient
    const Fp8CastBytes casts = fp8_cast_bytes(spec, op);
    layer.forward += ComputeSeconds{flops * per_flop, 0, casts.forward / hw.hbm_bytes_per_s};
    layer.backward += ComputeSeconds{flops * per_flop, 0, casts.input_grad / hw.hbm_bytes_per_s};
    layer.weight_grad += ComputeSeconds{flops * per_flop, 0, casts.weight_grad / hw.hbm_bytes_per_s};
  }
  StageCompute c{layers * layer.forward, layers * layer.backward, layers * layer.weight_grad};
  if (spec.train.recompute == config::Recompute::Full) c.backward += c.forward;
  return c;
}

}  // namespace ptrain::plan
