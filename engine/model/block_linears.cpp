#include "engine/model/block_linears.h"

#include "engine/runtime/owned_buffer.h"

namespace ptrain::model {

using kernels::Fp8Format;

BlockLinears::Rounded BlockLinears::round(Buf d_out, Buf in, Buf weight, int M, int N, int K) const {
  struct Operand {
    Buf x;
    std::int64_t n;
    Buf into;
    Fp8Format format;
  };
  const Operand operands[] = {{d_out, static_cast<std::int64_t>(M) * N, scratch_.output_grad, Fp8Format::E5M2},
                              {in, static_cast<std::int64_t>(M) * K, scratch_.input, Fp8Format::E4M3},
                              {weight, static_cast<std::int64_t>(N) * K, scratch_.weight, Fp8Format::E4M3}};
  constexpr std::int64_t kOperands = kFp8Operands;
  const bool by_history = scales_by_history();
  if (!by_history) {  // this step's amaxes, over what one rank would hold
    for (std::int64_t i = 0; i < kOperands; ++i) {
      const Operand& o = operands[i];
      const Buf amax = runtime::advance(scratch_.amax, i);
      if (o.x)
        ops_.abs_max(amax, o.x, o.n, false);
      else
        ops_.fill(amax, 0.0f, 1);  // every rank reduces all three, whichever it has
    }
    if (tp_ != nullptr) tp_->max_over_group(scratch_.amax, kOperands);
    if (cp_ != nullptr) cp_->max_over_group(scratch_.amax, kOperands);
  }
  Buf rounded[kOperands];
  for (std::int64_t i = 0; i < kOperands; ++i) {
    const Operand& o = operands[i];
    if (!o.x) continue;
    Buf amax = runtime::advance(scratch_.amax, i);
    if (delayed_) {
      const Buf record = runtime::advance(delayed_->amaxes.record, i);
      if (by_history) {
        ops_.abs_max(record, o.x, o.n, true);  // this rank's part: the step's end reduces it
        amax = runtime::advance(delayed_->amaxes.scale, i);
      } else {
        ops_.abs_max(record, amax, 1, true);
      }
    }
    ops_.fp8_round(o.into, o.x, amax, o.n, o.format);
    rounded[i] = o.into;
  }
  return {rounded[0], rounded[1], rounded[2]};
}

void BlockLinears::forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) const {
  if (!fp8_) return ops_.linear_forward(out, in, weight, bias, M, N, K);
  const Rounded r = round(Buf{}, in, weight, M, N, K);
  ops_.linear_forward(out, r.in, r.weight, bias, M, N, K);
}

void BlockLinears::forward_gelu(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N, int K) const {
  if (!fp8_) return ops_.linear_gelu_forward(out, pre, in, weight, bias, M, N, K);
  const Rounded r = round(Buf{}, in, weight, M, N, K);
  ops_.linear_gelu_forward(out, pre, r.in, r.weight, bias, M, N, K);
}

void BlockLinears::backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N,
                            int K) const {
  if (!fp8_) return ops_.linear_backward(d_in, d_weight, d_bias, d_out, in, weight, M, N, K);
  // The input gradient reads the weight, the weight gradient the input: round only what is read.
  const Rounded r = round(d_out, d_weight ? in : Buf{}, d_in ? weight : Buf{}, M, N, K);
  if (d_in || d_weight) ops_.linear_backward(d_in, d_weight, Buf{}, r.d_out, r.in, r.weight, M, N, K);
  if (d_bias) ops_.linear_backward(Buf{}, Buf{}, d_bias, d_out, in, weight, M, N, K);
}

void BlockLinears::backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre,
                                 int M, int N, int K) const {
  if (!fp8_) return ops_.linear_backward_gelu(d_pre, d_weight, d_bias, d_out, in, weight, pre, M, N, K);
  const Rounded r = round(d_out, d_weight ? in : Buf{}, weight, M, N, K);
  ops_.linear_backward_gelu(d_pre, d_weight, Buf{}, r.d_out, r.in, r.weight, pre, M, N, K);
  if (d_bias) ops_.linear_backward(Buf{}, Buf{}, d_bias, d_out, in, weight, M, N, K);
}

void BlockLinears::input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K, bool apply) const {
  if (!fp8_) {
    if (apply) ops_.linear_input_grad_add(d_in, d_out, weight, M, N, K);
    return;
  }
  // Current amaxes are reduced over the groups on every rank; from the history nothing is shared.
  if (!apply && scales_by_history()) return;
  const Rounded r = round(d_out, Buf{}, weight, M, N, K);
  if (apply) ops_.linear_input_grad_add(d_in, r.d_out, r.weight, M, N, K);
}

}  // namespace ptrain::model
