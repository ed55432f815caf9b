// AdamW over a flat F32 range with decoupled weight decay (Loshchilov & Hutter, as torch.optim.AdamW):
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// step t counts from 1. The bias corrections are computed once in double. Chunks in parallel,
// each chunk's loop multiversioned (isa.h).
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

struct AdamWConstants {
  float lr, beta1, beta2, one_minus_b1, one_minus_b2, inv_bc1, inv_bc2, eps, weight_decay;
};

[[gnu::always_inline]] inline void adamw_body(float* p, const float* g, float* m, float* v, std::int64_t n,
                                              const AdamWConstants& k) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
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

void adamw_step(Buf param, Buf grad, Buf m, Buf v, std::int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int step) {
  check_adamw_step("cpu", param, grad, m, v, n, step);
  const AdamWConstants k{lr,
                         beta1,
                         beta2,
                         1.0f - beta1,
                         1.0f - beta2,
                         static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), step))),
                         static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), step))),
                         eps,
                         weight_decay};
  float* p = f32(param);
  const float* g = cf32(grad);
  float* m1 = f32(m);
  float* m2 = f32(v);
  parallel_chunks(
      n, [&](std::int64_t i, std::int64_t len) { adamw_kernel(p + i, g + i, m1 + i, m2 + i, len, k); });
}

}  // namespace ptrain::kernels::cpu
