// Mixture-of-experts routing, dispatch and combine (ops.h). Routing is per token (softmax, top-k,
// renormalisation) and then per sequence (the capacity scan, in position order); dispatch and
// combine move rows between the tokens and the experts' slots. BF16 rows are staged
// (bf16_staging.h); the routing tensors are F32 and I32 on every backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void moe_route(Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits, int B, int T, int E,
               int k, int capacity, int first_expert, int experts_here) {
  check_moe_route("cpu", probs, choice, weight, slot, counts, logits, B, T, E, k, capacity, first_expert,
                  experts_here);
  const std::int64_t N = static_cast<std::int64_t>(B) * T;
  const float* x = logits.as<const float>();
  float* p = probs.as<float>();
  std::int32_t* ch = choice.as<std::int32_t>();
  float* w = weight.as<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) {
    const float* row = x + n * E;
    float* pr = p + n * E;
    float max = -INFINITY;
    for (int e = 0; e < E; ++e) max = std::max(max, row[e]);
    double sum = 0;
    for (int e = 0; e < E; ++e) {
      pr[e] = std::exp(row[e] - max);
      sum += pr[e];
    }
    for (int e = 0; e < E; ++e) pr[e] = static_cast<float>(pr[e] / sum);
    double chosen = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        const bool taken = std::find(ch + n * k, ch + n * k + j, e) != ch + n * k + j;
        if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
      }
      ch[n * k + j] = best;
      chosen += pr[best];
    }
    for (int j = 0; j < k; ++j) w[n * k + j] = static_cast<float>(pr[ch[n * k + j]] / chosen);
  }
  std::int32_t* sl = slot.as<std::int32_t>();
  float* cnt = counts.as<float>();
  const std::int64_t per_expert = static_cast<std::int64_t>(B) * capacity;
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    std::vector<std::int64_t> taken(static_cast<std::size_t>(E), 0);
    for (std::int64_t i = static_cast<std::int64_t>(b) * T * k;
         i < (static_cast<std::int64_t>(b) + 1) * T * k; ++i) {
      const int e = ch[i];
      const std::int64_t used = taken[static_cast<std::size_t>(e)]++;
      const int here = e - first_expert;
      sl[i] =
          used < capacity && here >= 0 && here < experts_here
              ? static_cast<std::int32_t>(here * per_expert + static_cast<std::int64_t>(b) * capacity + used)
              : -1;
    }
    for (int e = 0; e < E; ++e)
      cnt[static_cast<std::int64_t>(b) * E + e] = static_cast<float>(taken[static_cast<std::size_t>(e)]);
  }
}

void moe_route_backward(Buf d_logits, Buf d_weight, Buf probs, Buf choice, Buf weight, Buf counts, int B,
                        int T, int E, int k, float aux_scale) {
  check_moe_route_backward("cpu", d_logits, d_weight, probs, choice, weight, counts, B, T, E, k);
  const std::int64_t N = static_cast<std::int64_t>(B) * T;
  Bf16Staging staging;
  float* dl = f32(staging.output(d_logits, N * E));
  const float* dw = d_weight.as<const float>();
  const float* p = probs.as<const float>();
  const std::int32_t* ch = choice.as<const std::int32_t>();
  const float* w = weight.as<const float>();
  const float* cnt = counts.as<const float>();
  // d aux / d probs[b*T+t, e] = aux_scale * E * counts[b,e] / T^2, the same for every t of sequence b.
  const double aux_per_count = static_cast<double>(aux_scale) * E / (static_cast<double>(T) * T);
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t b = n / T;
    const float* pr = p + n * E;
    std::vector<double> d_p(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) d_p[static_cast<std::size_t>(e)] = aux_per_count * cnt[b * E + e];
    // weight_j = p_j / S over the chosen: d p_m = (d w_m - sum_j d w_j w_j) / S.
    double chosen = 0, dw_dot_w = 0;
    for (int j = 0; j < k; ++j) {
      chosen += pr[ch[n * k + j]];
      dw_dot_w += static_cast<double>(dw[n * k + j]) * w[n * k + j];
    }
    for (int j = 0; j < k; ++j)
      d_p[static_cast<std::size_t>(ch[n * k + j])] += (dw[n * k + j] - dw_dot_w) / chosen;
    double p_dot_dp = 0;
    for (int e = 0; e < E; ++e) p_dot_dp += pr[e] * d_p[static_cast<std::size_t>(e)];
    for (int e = 0; e < E; ++e)
      dl[n * E + e] = static_cast<float>(pr[e] * (d_p[static_cast<std::size_t>(e)] - p_dot_dp));
  }
}

void moe_scatter(Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight, int N, int k, int R, int C) {
  check_moe_scatter("cpu", rows, d_weight, x, src, slot, weight, N, k, R, C);
  const std::int32_t* sl = slot.as<const std::int32_t>();
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(N) * k; ++i)
    if (sl[i] >= R)
      fail("cpu", "moe_scatter",
           "slot " + std::to_string(sl[i]) + " beyond the " + std::to_string(R) + " rows");
  Bf16Staging staging;
  const std::int64_t rc = static_cast<std::int64_t>(R) * C;
  float* out = f32(staging.output(rows, rc));
  const float* in = cf32(staging.input(x, static_cast<std::int64_t>(N) * C));
  const float* from = d_weight ? cf32(staging.input(src, rc)) : nullptr;
  const float* w = weight ? weight.as<const float>() : nullptr;
  float* dw = d_weight ? d_weight.as<float>() : nullptr;
  std::fill(out, out + rc, 0.0f);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(N) * k; ++i) {
    const std::int64_t s = sl[i];
    const float* token = in + i / k * C;
    if (dw != nullptr) {
      double dot = 0;
      if (s >= 0)
        for (int c = 0; c < C; ++c) dot += static_cast<double>(token[c]) * from[s * C + c];
      dw[i] = static_cast<float>(dot);
    }
    if (s < 0) continue;
    const float scale = w != nullptr ? w[i] : 1.0f;
    for (int c = 0; c < C; ++c) out[s * C + c] = scale * token[c];
  }
}

void moe_combine(Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) {
  check_moe_combine("cpu", out, rows, slot, weight, N, k, C);
  const std::int32_t* sl = slot.as<const std::int32_t>();
  std::int64_t R = 0;  // rows read: up to the highest slot
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(N) * k; ++i)
    R = std::max<std::int64_t>(R, sl[i] + 1);
  Bf16Staging staging;
  float* o = f32(staging.output(out, static_cast<std::int64_t>(N) * C));
  const float* in = cf32(staging.input(rows, R * C));
  const float* w = weight ? weight.as<const float>() : nullptr;
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) {
    float* token = o + n * C;
    std::fill(token, token + C, 0.0f);
    for (int j = 0; j < k; ++j) {
      const std::int64_t s = sl[n * k + j];
      if (s < 0) continue;
      const float scale = w != nullptr ? w[n * k + j] : 1.0f;
      for (int c = 0; c < C; ++c) token[c] += scale * in[s * C + c];
    }
  }
}

}  // namespace ptrain::kernels::cpu
