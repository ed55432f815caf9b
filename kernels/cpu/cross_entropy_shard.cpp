// Vocab-parallel softmax cross-entropy (ops.h): the logits of one shard of Vs columns, shard r
// holding columns [r*Vs, (r+1)*Vs) of the padded vocabulary, real where < V. Per row:
//   stats:  m_r = max x_v, s_r = sum e^{x_v - m_r} over the shard's real columns; x_t if it holds
//           the target (a shard of padding only: m_r = -inf, s_r = 0)
//   loss:   M = max_r m_r, S = sum_r s_r e^{m_r - M}, loss = log(S) + M - x_target
//   grad:   d_logits_v = grad_scale * (e^{x_v - M} / S - [v == target]), padding 0
// which is cross_entropy.cpp's math with the row's sum split over the shards. Rows in parallel;
// logits and d_logits F32 or BF16 (staged, bf16_staging.h), stats and losses F32, targets I32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/op_checks.h"
#include "kernels/ops.h"

namespace ptrain::kernels::cpu {
namespace {

constexpr int kStats = kCrossEntropyShardStats;  // max, sum of exponentials, target logit

// The shard's real columns: those below V.
std::int64_t real_columns(int V, int Vs, int shard) {
  return std::clamp<std::int64_t>(std::int64_t{V} - std::int64_t{shard} * Vs, 0, Vs);
}

}  // namespace

void cross_entropy_shard_stats(Buf stats, Buf logits, Buf targets, int N, int V, int Vs, int shard) {
  constexpr const char* op = "cross_entropy_shard_stats";
  check_cross_entropy_shard_stats("cpu", stats, logits, targets, N, V, Vs, shard);
  const std::int32_t* tgt = ci32(targets);
  require_targets_below(op, tgt, N, V);
  Bf16Staging staging;
  const float* x_all = cf32(staging.input(logits, std::int64_t{N} * Vs));
  float* out = f32(stats);
  const std::int64_t real = real_columns(V, Vs, shard), v0 = std::int64_t{shard} * Vs;
#pragma omp parallel for schedule(static) if (std::int64_t{N} * Vs >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    const float* x = x_all + n * Vs;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (std::int64_t v = 0; v < real; ++v) mx = x[v] > mx ? x[v] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t v = 0; v < real; ++v) sum += exp_f32(x[v] - mx);
    const std::int64_t t = std::int64_t{tgt[n]} - v0;
    out[n * kStats] = mx;
    out[n * kStats + 1] = sum;
    out[n * kStats + 2] = tgt[n] >= 0 && t >= 0 && t < real ? x[t] : 0.0f;
  }
}

void cross_entropy_shard_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf all_stats, Buf targets,
                                          int N, int V, int Vs, int shard, int shards, float grad_scale) {
  constexpr const char* op = "cross_entropy_shard_forward_backward";
  check_cross_entropy_shard_forward_backward("cpu", losses, d_logits, logits, all_stats, targets, N, V, Vs,
                                             shard, shards);
  const std::int32_t* tgt = ci32(targets);
  require_targets_below(op, tgt, N, V);
  const std::int64_t NVs = std::int64_t{N} * Vs;
  Bf16Staging staging;
  float* loss = f32(losses);
  float* dl_all = d_logits ? f32(staging.output(d_logits, NVs)) : nullptr;
  const float* x_all = cf32(staging.input(logits, NVs));
  const float* st = cf32(all_stats);
  const std::int64_t real = real_columns(V, Vs, shard), v0 = std::int64_t{shard} * Vs;
  const std::int64_t shard_stride = std::int64_t{N} * kStats;
#pragma omp parallel for schedule(static) if (NVs >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    float* dl = dl_all ? dl_all + n * Vs : nullptr;
    if (tgt[n] < 0) {
      loss[n] = 0.0f;
      if (dl) std::fill(dl, dl + Vs, 0.0f);
      continue;
    }
    // A shard of padding only ({-inf, 0}) adds nothing; a NaN or inf logit anywhere makes the loss
    // NaN, as in the whole-row op.
    float mx = -std::numeric_limits<float>::infinity();
    for (int r = 0; r < shards; ++r) mx = std::max(mx, st[r * shard_stride + n * kStats]);
    float sum = 0.0f;
    for (int r = 0; r < shards; ++r) {
      const float* s = st + r * shard_stride + n * kStats;
      const bool padding_only = s[0] == -std::numeric_limits<float>::infinity() && s[1] == 0.0f;
      if (!padding_only) sum += s[1] * (s[0] == mx ? 1.0f : std::exp(s[0] - mx));
    }
    const std::int64_t owner = tgt[n] / Vs;
    loss[n] = std::log(sum) + mx - st[owner * shard_stride + n * kStats + 2];
    if (!dl) continue;
    const float* x = x_all + n * Vs;
    const float factor = grad_scale / sum;
#pragma omp simd
    for (std::int64_t v = 0; v < real; ++v) dl[v] = exp_f32(x[v] - mx) * factor;
    std::fill(dl + real, dl + Vs, 0.0f);
    if (owner == shard) dl[tgt[n] - v0] -= grad_scale;
  }
}

}  // namespace ptrain::kernels::cpu
