// What train.precision fp8 changes in a stage's compute time (docs/fp8.md, "Time"), for each FP8
// linear layer of the layer description (model::Op::fp8; the router, the LM head and attention stay
// in bf16):
//  - its GEMMs run at the FP8 rate, hw.peak_flops_fp8: without a profile its FLOPs at
//    peak_flops_fp8 x kGemmEfficiency instead of bf16's; with one, the profile's FP8 GEMM table
//    (gemm/fp8: measured_profile.h), or for a profile without it its bf16 GEMM time x
//    (peak_flops_bf16 / peak_flops_fp8). (On the CPU the emulation runs the fp32 GEMM over the
//    codes' values: its datasheet ratio is 1, and its table says what the decoding costs.)
//  - each operand is cast first, one memory-bound pass that reads it in the working dtype and writes
//    its codes (a byte an element); under current scaling one more read for its amax (delayed
//    scaling records the amax in the cast itself), but for the amaxes a dense layer knows
//    (model::Op::fp8_input_amax_written, fp8_amaxes_kept, fp8_output_grad_amax_written: taken by the
//    norm or activation that wrote the tensor, or kept from the forward and the input gradient):
//      forward       the input [M, K] and the weight [N, K]
//      input grad    the output gradient [M, N] and the weight, transposed
//      weight grad   the output gradient, transposed, and the input, transposed
//    but the input only once for the layers that read one (q, k and v; gate and up; an expert's w1
//    and w3: model::Op::fp8_input_shared), and where the weights' codes are kept for the step
//    (model::keeps_fp8_weight_copies: below ZeRO-3) each weight cast once a step, both ways, its
//    share charged to each microbatch's forward (model::Op::weights of them; full recompute charges
//    the share again, as it reruns the forward: at most one weight cast a layer too many a step)
//    (model/block_linears.cpp; a backward that runs both
//    halves at once reads the output gradient once, which this charges twice, as zb-h1's split runs
//    it). Timed at the profile's activation table (a pass of the same bytes), else at the HBM
//    bandwidth.
#pragma once

#include "engine/config/job_spec.h"
#include "engine/model/layer_description.h"
#include "engine/plan/compute_time.h"
#include "engine/plan/hardware.h"
#include "engine/plan/measured_profile.h"

namespace ptrain::plan {

// Bytes the casts of FP8 linear op `op` (all its GemmShape::count calls) read and write, per part.
struct Fp8CastBytes {
  double forward = 0, input_grad = 0, weight_grad = 0;
};
Fp8CastBytes fp8_cast_bytes(const config::JobSpec& spec, const model::Op& op);

// An FP8 linear op's seconds from a measured profile: its GEMMs from the FP8 GEMM table, or at the
// FP8 rate of the job's hardware (cluster.gpu) without one, its casts from the activation table.
// std::invalid_argument as op_seconds.
OpSeconds fp8_op_seconds(const config::JobSpec& spec, const MeasuredProfile& profile, const model::Op& op);

// Without a profile: what the FP8 linear layers of `layers` layers change in the compute that
// step_time.h charges at peak x kGemmEfficiency of bf16 -- their FLOPs at the FP8 rate instead
// (gemm, negative where FP8 is faster) and their casts at HBM bandwidth (memory); full recompute
// runs the forward's again before the backward, as step_time.h counts its FLOPs.
StageCompute fp8_at_peak(const config::JobSpec& spec, const model::ModelOps& ops, const HardwareProfile& hw,
                         int layers);

}  // namespace ptrain::plan
