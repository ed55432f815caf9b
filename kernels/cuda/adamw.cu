// AdamW over a flat F32 range, one fused grid-stride kernel, the CPU's arithmetic
// (kernels/cpu/adamw.cpp): decoupled weight decay, bias corrections computed once on the host in
// double, step t >= 1:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// param, grad, m and v are F32 (fp32 master weights and optimizer state).
#include <cmath>
#include <cstdint>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

struct AdamWUpdate {
  float* p;
  const float* g;
  float* m;
  float* v;
  float lr, beta1, beta2, one_minus_b1, one_minus_b2, inv_bc1, inv_bc2, eps, weight_decay;
  __device__ void operator()(std::int64_t i) const {
    const float gi = g[i];
    const float mi = beta1 * m[i] + one_minus_b1 * gi;
    const float vi = beta2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps);
    p[i] -= lr * (update + weight_decay * p[i]);
  }
};

}  // namespace

void adamw_step(const LaunchContext& ctx, Buf param, Buf grad, Buf m, Buf v, std::int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int step) {
  check_adamw_step("cuda", param, grad, m, v, n, step);
  const AdamWUpdate update{typed<float>(param),
                           typed<const float>(grad),
                           typed<float>(m),
                           typed<float>(v),
                           lr,
                           beta1,
                           beta2,
                           1.0f - beta1,
                           1.0f - beta2,
                           static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), step))),
                           static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), step))),
                           eps,
                           weight_decay};
  launch_map(ctx.stream, n, update);
}

}  // namespace ptrain::kernels::cuda
