// attention_merge (ops.h): two softmax attentions of the same queries over disjoint key sets,
// folded into one. Each row's weights are its log-sum-exps: with m = max(lse, part_lse),
// wa = e^(lse - m), wb = e^(part_lse - m), out = (wa out + wb part) / (wa + wb) and
// lse = m + log(wa + wb). A row that saw no keys yet has lse = -inf and takes part as it is.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void attention_merge(Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H, int D) {
  check_attention_merge("cpu", out, lse, part, part_lse, B, T, H, D);
  const std::int64_t n = std::int64_t{B} * T * H * D;
  Bf16Staging staging;
  float* o = f32(staging.output(out, n));
  const float* p = cf32(staging.input(part, n));
  float* l = f32(lse);
  const float* pl = cf32(part_lse);
#pragma omp parallel for collapse(2) if (n >= 1 << 16)
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t row = (b * H + h) * T + t;  // of lse [B, H, T]
        const float m = std::max(l[row], pl[row]);
        if (m == -INFINITY) continue;  // neither part saw a key
        const float wa = std::exp(l[row] - m), wb = std::exp(pl[row] - m), sum = wa + wb;
        const float ca = wa / sum, cb = wb / sum;
        float* orow = o + ((b * T + t) * H + h) * D;
        const float* prow = p + ((b * T + t) * H + h) * D;
        if (ca == 0.0f) {  // out holds nothing yet (whatever it holds must not reach the sum)
          std::copy(prow, prow + D, orow);
        } else {
#pragma omp simd
          for (std::int64_t d = 0; d < D; ++d) orow[d] = ca * orow[d] + cb * prow[d];
        }
        l[row] = m + std::log(sum);
      }
}

}  // namespace ptrain::kernels::cpu
