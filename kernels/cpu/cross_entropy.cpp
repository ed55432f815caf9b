// Softmax cross-entropy over logits[N, Vp], fused with its gradient. Columns [V, Vp) are vocab
// padding: ignored by the softmax, their d_logits set to 0. Per row (rows in parallel):
//   mx = max_{v<V} x_v,  sum = sum_{v<V} e^{x_v - mx},  loss = log(sum) + mx - x_target
//   d_logits_v = grad_scale * (e^{x_v - mx} / sum - [v == target])
// A target < 0 is ignored: loss 0 and a zero gradient row; a target >= V is an error. d_logits may
// alias logits (the target's logit is read before the row is overwritten) and may be null (loss
// only, e.g. evaluation). The sum runs in float over terms <= 1 (relative error ~1e-6 at V = 50K).
// The row loop is multiversioned (isa.h). logits and d_logits share one element type, F32 or BF16
// (staged, bf16_staging.h); losses F32; targets I32; as on CUDA.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

// Loss of one row with a valid target; writes the gradient row when dl is not null.
[[gnu::always_inline]] inline void ce_row_body(float* loss, float* dl, const float* x, std::int32_t target,
                                               std::int64_t V, std::int64_t Vp, float grad_scale) {
  const float x_target = x[target];
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (std::int64_t v = 0; v < V; ++v) mx = x[v] > mx ? x[v] : mx;
  float sum = 0.0f;
  if (dl) {
#pragma omp simd reduction(+ : sum)
    for (std::int64_t v = 0; v < V; ++v) {
      const float e = exp_f32(x[v] - mx);
      dl[v] = e;
      sum += e;
    }
    const float factor = grad_scale / sum;
#pragma omp simd
    for (std::int64_t v = 0; v < V; ++v) dl[v] *= factor;
    dl[target] -= grad_scale;
    for (std::int64_t v = V; v < Vp; ++v) dl[v] = 0.0f;
  } else {
#pragma omp simd reduction(+ : sum)
    for (std::int64_t v = 0; v < V; ++v) sum += exp_f32(x[v] - mx);
  }
  *loss = std::log(sum) + mx - x_target;
}

PTRAIN_CPU_MULTIVERSION(ce_row, ce_row_body,
                        (float* loss, float* dl, const float* x, std::int32_t target, std::int64_t V,
                         std::int64_t Vp, float grad_scale),
                        (loss, dl, x, target, V, Vp, grad_scale))

}  // namespace

void require_targets_below(const char* op, const std::int32_t* targets, int N, int V) {
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] >= V)
      fail("cpu", op, "target " + std::to_string(targets[n]) + " at row " + std::to_string(n) + " >= V");
  }
}

void cross_entropy_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf targets, int N, int V, int Vp,
                                    float grad_scale) {
  constexpr const char* op = "cross_entropy_forward_backward";
  check_cross_entropy_forward_backward("cpu", losses, d_logits, logits, targets, N, V, Vp);
  const std::int32_t* tgt = ci32(targets);
  require_targets_below(op, tgt, N, V);
  const std::int64_t NVp = std::int64_t{N} * Vp;
  Bf16Staging staging;
  float* loss = f32(losses);
  float* dl_all = d_logits ? f32(staging.output(d_logits, NVp)) : nullptr;
  const float* x_all = cf32(staging.input(logits, NVp));
#pragma omp parallel for schedule(static) if (std::int64_t{N} * Vp >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    float* dl = dl_all ? dl_all + n * Vp : nullptr;
    if (tgt[n] < 0) {
      loss[n] = 0.0f;
      if (dl) {
        for (std::int64_t v = 0; v < Vp; ++v) dl[v] = 0.0f;
      }
      continue;
    }
    ce_row(loss + n, dl, x_all + n * Vp, tgt[n], V, Vp, grad_scale);
  }
}

}  // namespace ptrain::kernels::cpu
