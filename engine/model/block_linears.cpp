#include "engine/model/block_linears.h"

#include <stdexcept>

#include "engine/runtime/owned_buffer.h"

namespace ptrain::model {

using kernels::DType;
using kernels::Fp8Format;

bool BlockLinears::input_cast_before(Buf in, bool transposed) const {
  if (shared_ == nullptr || !shared_->x) return false;
  if (shared_->x.ptr != in.ptr || shared_->transposed != transposed)
    throw std::logic_error("BlockLinears: a SharedInput holds the codes of another input, or another orientation");
  return true;
}

BlockLinears::Operands BlockLinears::cast(const Casts& which, Buf d_out, Buf in, Buf weight, int M, int N,
                                          int K) const {
  // In amax's order (fp8_history.h): output gradient, input, weight; each [rows, cols] as stored.
  struct Operand {
    Buf x;
    std::int64_t rows, cols;
    Buf out, out_t, inv_scale;
    Buf known_amax = {};
  };
  auto codes = [](Buf b, DType t, bool wanted) { return wanted ? Buf{b.ptr, t} : Buf{}; };
  const bool t = which.transposed;
  const bool in_shared = which.in && input_cast_before(in, t);  // cast by another linear layer
  // The weight's codes kept for the pass: cast at its first use, both ways, then read.
  Fp8WeightCopy* copy = which.weight && weight_copy_
                            ? &weight_copy_->copies->at(weight_copy_->layer, weight_copy_->index,
                                                        static_cast<std::int64_t>(N) * K)
                            : nullptr;
  const bool weight_kept = copy != nullptr && copy->fresh;
  const Buf inv = scratch_.inv_scale;
  const Operand operands[] = {
      {which.d_out || which.d_out_t ? d_out : Buf{}, M, N, codes(scratch_.output_grad, DType::E5M2, which.d_out),
       codes(scratch_.output_grad_t, DType::E5M2, which.d_out_t), inv, which.known.d_out},
      {which.in && !in_shared ? in : Buf{}, M, K, codes(scratch_.input, DType::E4M3, which.in && !t),
       codes(scratch_.input, DType::E4M3, which.in && t), runtime::advance(inv, 1), which.known.in},
      copy != nullptr
          ? Operand{weight_kept ? Buf{} : weight, N, K, copy->codes.at(), copy->codes_t.at(), copy->inv_scale.at()}
          : Operand{which.weight ? weight : Buf{}, N, K, codes(scratch_.weight, DType::E4M3, which.weight && !t),
                    codes(scratch_.weight, DType::E4M3, which.weight && t), runtime::advance(inv, 2)}};
  constexpr std::int64_t kOperands = kFp8Operands;
  const bool by_history = scales_by_history();
  if (!by_history) {  // this step's amaxes, over what one rank would hold
    for (std::int64_t i = 0; i < kOperands; ++i) {
      const Operand& o = operands[i];
      const Buf amax = runtime::advance(scratch_.amax, i);
      if (o.x && o.known_amax)
        ops_.copy(amax, o.known_amax, sizeof(float));
      else if (o.x)
        ops_.abs_max(amax, o.x, o.rows * o.cols, false);
      else
        ops_.fill(amax, 0.0f, 1);  // every rank reduces all three, whichever it has
    }
    if (tp_ != nullptr) tp_->max_over_group(scratch_.amax, kOperands);
    if (cp_ != nullptr) cp_->max_over_group(scratch_.amax, kOperands);
  }
  for (std::int64_t i = 0; i < kOperands; ++i) {
    const Operand& o = operands[i];
    if (!o.x) continue;
    Buf amax = runtime::advance(scratch_.amax, i), record;
    if (delayed_) {
      record = runtime::advance(delayed_->amaxes.record, i);
      if (by_history) {
        amax = runtime::advance(delayed_->amaxes.scale, i);  // the cast records this rank's part
      } else {
        ops_.abs_max(record, amax, 1, true);  // the amax reduced above
        record = Buf{};
      }
    }
    ops_.fp8_cast(o.out, o.out_t, o.inv_scale, record, o.x, amax, o.rows, o.cols);
  }
  if (copy != nullptr) copy->fresh = true;
  Buf in_codes = operands[1].out ? operands[1].out : operands[1].out_t, in_inv = operands[1].inv_scale;
  const Buf in_record = delayed_ ? runtime::advance(delayed_->amaxes.record, 1) : Buf{};
  if (in_shared) {
    in_codes = shared_->codes, in_inv = shared_->inv_scale;
    if (delayed_) ops_.abs_max(in_record, shared_->record, 1, true);  // the history the cast would have kept
  } else if (which.in && shared_ != nullptr) {
    *shared_ = {in, t, in_codes, in_inv, in_record};
  }
  const Operand& w = operands[2];  // a kept copy holds both orientations
  const Buf weight_codes = copy != nullptr ? (t ? w.out_t : w.out) : (w.out ? w.out : w.out_t);
  return {operands[0].out, operands[0].out_t, in_codes, weight_codes, operands[0].inv_scale, in_inv, w.inv_scale};
}

void BlockLinears::forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K, Buf in_amax) const {
  if (!fp8_) return ops_.linear_forward(out, in, weight, bias, M, N, K);
  const Operands o = cast({.in = true, .weight = true, .known = {.in = in_amax}}, Buf{}, in, weight, M, N, K);
  ops_.fp8_gemm(out, o.in, o.weight, o.in_inv, o.weight_inv, bias, M, N, K, false, kFp8ForwardSums);
}

void BlockLinears::forward_gelu(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N, int K, Buf in_amax,
                                Buf out_amax) const {
  if (!fp8_) return ops_.linear_gelu_forward(out, pre, in, weight, bias, M, N, K);
  const Operands o = cast({.in = true, .weight = true, .known = {.in = in_amax}}, Buf{}, in, weight, M, N, K);
  ops_.fp8_gemm_gelu(out, pre, o.in, o.weight, o.in_inv, o.weight_inv, bias, M, N, K, kFp8ForwardSums, out_amax);
}

// d_in[M,K] = d_out[M,N] weight[N,K]: the weight's transposed codes [K,N] as the GEMM's b.
// d_weight[N,K] += d_out^T[N,M] in[M,K]: both transposed, [N,M] and [K,M].
void BlockLinears::backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N,
                            int K, KnownAmaxes known) const {
  if (!fp8_) return ops_.linear_backward(d_in, d_weight, d_bias, d_out, in, weight, M, N, K);
  // The input gradient reads the weight, the weight gradient the input: cast only what is read. The
  // output gradient's amax is taken (and recorded) whatever is asked, as bf16 mode would read it.
  const bool din = static_cast<bool>(d_in), dw = static_cast<bool>(d_weight);
  const Operands o =
      cast({.d_out = din || !dw, .d_out_t = dw, .in = dw, .weight = din, .transposed = true, .known = known}, d_out,
           in, weight, M, N, K);
  if (din) ops_.fp8_gemm(d_in, o.d_out, o.weight, o.d_out_inv, o.weight_inv, Buf{}, M, K, N, false, kFp8GradientSums);
  if (dw) ops_.fp8_gemm(d_weight, o.d_out_t, o.in, o.d_out_inv, o.in_inv, Buf{}, N, K, M, true, kFp8GradientSums);
  if (d_bias) ops_.linear_backward(Buf{}, Buf{}, d_bias, d_out, in, weight, M, N, K);
}

void BlockLinears::backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre,
                                 int M, int N, int K, KnownAmaxes known, Buf d_pre_amax) const {
  if (!fp8_) return ops_.linear_backward_gelu(d_pre, d_weight, d_bias, d_out, in, weight, pre, M, N, K);
  const bool dw = static_cast<bool>(d_weight);
  const Operands o = cast(
      {.d_out = true, .d_out_t = dw, .in = dw, .weight = true, .transposed = true, .known = known}, d_out, in,
      weight, M, N, K);
  ops_.fp8_gemm(d_pre, o.d_out, o.weight, o.d_out_inv, o.weight_inv, Buf{}, M, K, N, false, kFp8GradientSums);
  if (dw) ops_.fp8_gemm(d_weight, o.d_out_t, o.in, o.d_out_inv, o.in_inv, Buf{}, N, K, M, true, kFp8GradientSums);
  ops_.gelu_backward(d_pre, d_pre, pre, static_cast<std::int64_t>(M) * K, d_pre_amax);  // in place, as ops.h allows
  if (d_bias) ops_.linear_backward(Buf{}, Buf{}, d_bias, d_out, in, weight, M, N, K);
}

void BlockLinears::input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K, bool apply,
                                  Buf d_out_amax) const {
  if (!fp8_) {
    if (apply) ops_.linear_input_grad_add(d_in, d_out, weight, M, N, K);
    return;
  }
  // Current amaxes are reduced over the groups on every rank; from the history nothing is shared.
  if (!apply && scales_by_history()) return;
  const Operands o = cast({.d_out = true, .weight = true, .transposed = true, .known = {.d_out = d_out_amax}}, d_out,
                          Buf{}, weight, M, N, K);
  if (apply)
    ops_.fp8_gemm(d_in, o.d_out, o.weight, o.d_out_inv, o.weight_inv, Buf{}, M, K, N, true, kFp8GradientSums);
}

}  // namespace ptrain::model
