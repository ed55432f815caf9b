// The scalars of one AdamW update (Ops::adamw_step, kernels/ops.h), and the constants every
// backend's kernel reads from them.
#pragma once

#include <cmath>

namespace ptrain::kernels {

struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  int step = 1;             // t, counting updates from 1
  float grad_scale = 1.0f;  // the gradient's factor: the clip's, or 1
};

// Per call, on the host: the bias corrections 1 / (1 - beta^t) computed in double, rounded once.
struct AdamWConstants {
  float lr, beta1, beta2, one_minus_b1, one_minus_b2, inv_bc1, inv_bc2, eps, weight_decay, grad_scale;
};

inline AdamWConstants adamw_constants(const AdamWStep& s) {
  const double b1 = s.beta1, b2 = s.beta2;
  return {s.lr,
          s.beta1,
          s.beta2,
          1.0f - s.beta1,
          1.0f - s.beta2,
          static_cast<float>(1.0 / (1.0 - std::pow(b1, s.step))),
          static_cast<float>(1.0 / (1.0 - std::pow(b2, s.step))),
          s.eps,
          s.weight_decay,
          s.grad_scale};
}

}  // namespace ptrain::kernels
