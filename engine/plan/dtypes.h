// Bytes per element of each kind of tensor, by training precision.
//   bf16: bf16 params, grads and activations; fp32 master weights + Adam m + v = 12 bytes of
//         optimizer state (the ZeRO paper's K = 12).
//   fp32: fp32 params, grads and activations; Adam m + v = 8 bytes (no master copy needed).
#pragma once

#include "engine/config/job_spec.h"

namespace ptrain::plan {

struct BytesPerElement {
  int param, grad, optimizer, activation;
};

constexpr BytesPerElement bytes_per_element(config::Precision precision) {
  return precision == config::Precision::Bf16 ? BytesPerElement{2, 2, 12, 2} : BytesPerElement{4, 4, 8, 4};
}

}  // namespace ptrain::plan
