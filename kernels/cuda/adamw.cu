// AdamW over a flat F32 range, one fused grid-stride kernel, the CPU's arithmetic
// (kernels/cpu/adamw.cpp): decoupled weight decay, bias corrections computed once on the host in
// double, step t >= 1:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// on g = grad_scale * grad. param, grad, m and v are F32 (fp32 master weights and optimizer state);
// param_out, when given, receives the updated weight in its dtype in the same pass (bf16: the
// working copy of mixed precision, rounded to nearest even as convert rounds).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {


// O: the element type of param_out; void: none.
template <typename O>
struct AdamWUpdate {
  float* p;
  const float* g;
  float* m;
  float* v;
  O* out;
  AdamWConstants k;
  __device__ void operator()(std::int64_t i) const {
    const float gi = __fmul_rn(g[i], k.grad_scale);  // rounded alone, as a scale pass would
    const float mi = k.beta1 * m[i] + k.one_minus_b1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * k.inv_bc1) / (sqrtf(vi * k.inv_bc2) + k.eps);
    const float updated = p[i] - k.lr * (update + k.weight_decay * p[i]);
    p[i] = updated;
    if constexpr (!std::is_void_v<O>) store_f32(out + i, updated);
  }
};

}  // namespace

void adamw_step(const LaunchContext& ctx, Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                const AdamWStep& s) {
  check_adamw_step("cuda", param, grad, m, v, param_out, n, s.step);
  const AdamWConstants k = adamw_constants(s);
  float* p = typed<float>(param);
  const float* g = typed<const float>(grad);
  if (!param_out) {
    launch_map(ctx.stream, n, AdamWUpdate<void>{p, g, typed<float>(m), typed<float>(v), nullptr, k});
    return;
  }
  dispatch_float(param_out.dtype, [&](auto* tag) {
    using O = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, AdamWUpdate<O>{p, g, typed<float>(m), typed<float>(v), typed<O>(param_out), k});
  });
}

}  // namespace ptrain::kernels::cuda
