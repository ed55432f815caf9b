// AdamW over a flat F32 range with decoupled weight decay (Loshchilov & Hutter, as torch.optim.AdamW):
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// on g = grad_scale * grad; step t counts from 1. The bias corrections are computed once in double.
// Chunks in parallel, each chunk's loop multiversioned (isa.h), and each chunk's updated weights
// copied into param_out (rounded to bf16, or as they are) while they are in cache.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {


[[gnu::always_inline]] inline void adamw_body(float* p, const float* g, float* m, float* v, std::int64_t n,
                                              const AdamWConstants& k) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * k.grad_scale;
    const float mi = k.beta1 * m[i] + k.one_minus_b1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * k.inv_bc1) / (std::sqrt(vi * k.inv_bc2) + k.eps);
    p[i] -= k.lr * (update + k.weight_decay * p[i]);
  }
}

PTRAIN_CPU_MULTIVERSION(adamw_kernel, adamw_body,
                        (float* p, const float* g, float* m, float* v, std::int64_t n,
                         const AdamWConstants& k),
                        (p, g, m, v, n, k))

}  // namespace

void adamw_step(Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n, const AdamWStep& s) {
  check_adamw_step("cpu", param, grad, m, v, param_out, n, s.step);
  const AdamWConstants k = adamw_constants(s);
  float* p = f32(param);
  const float* g = cf32(grad);
  float* m1 = f32(m);
  float* m2 = f32(v);
  parallel_chunks(n, [&](std::int64_t i, std::int64_t len) {
    adamw_kernel(p + i, g + i, m1 + i, m2 + i, len, k);
    if (!param_out) return;
    if (param_out.dtype == DType::BF16)
      round_to_bf16(param_out.as<std::uint16_t>() + i, p + i, len);  // vectorised; one chunk: no threads of its own
    else
      std::memcpy(f32(param_out) + i, p + i, static_cast<std::size_t>(len) * sizeof(float));
  });
}

}  // namespace ptrain::kernels::cpu
