// Bytes per element of each kind of tensor, by training precision: what the engine allocates.
//   bf16: bf16 weights and activations for compute; fp32 gradients (Megatron's "main grads":
//         microbatches accumulate without bf16 rounding); fp32 master weights + Adam m + v =
//         12 bytes of optimizer state (the ZeRO paper's K = 12). 18 bytes per parameter unsharded.
//   fp32: fp32 weights, gradients and activations; the weights are their own master; Adam m + v
//         = 8 bytes. 16 bytes per parameter unsharded.
// Data-parallel reductions move gradients in train.grad_reduce's dtype (fp32 or bf16).
#pragma once

#include "engine/config/job_spec.h"

namespace ptrain::plan {

struct BytesPerElement {
  int param;       // the weights the model computes with
  int grad;        // accumulated gradients
  int master;      // fp32 master weights kept apart from `param` (0: `param` is the master)
  int moments;     // Adam's two moments
  int activation;
  constexpr int optimizer() const { return master + moments; }
};

constexpr BytesPerElement bytes_per_element(config::Precision precision) {
  return config::bf16_working(precision) ? BytesPerElement{2, 4, 4, 8, 2} : BytesPerElement{4, 4, 0, 8, 4};
}

// Bytes per gradient element on the wire of a data-parallel reduction.
constexpr int grad_reduce_bytes(const config::TrainSpec& train) {
  return train.grad_reduce == config::Precision::Bf16 ? 2 : 4;
}

}  // namespace ptrain::plan
