// The argument contract of the ops (ops.h), written once for every backend. Each backend's entry calls
// its op's check_* with the backend's name ("cpu", "cuda") before any work (no parallel region or
// kernel launch has started), so a wrong dtype, a missing required buffer, a negative size or an
// impossible shape throws std::invalid_argument("<backend> <op>: <what>") alike on every backend.
// Host-only plain C++: the .cu entries include it too.
//
// Limits of one backend's implementation (CUDA attention's head dims, say) are not contract: that
// backend checks them itself, after the contract, with fail()/require().
#pragma once

#include <cstdint>
#include <string>

#include "kernels/attention_shape.h"
#include "kernels/buffer.h"

namespace ptrain::kernels {

// Throws std::invalid_argument("<backend> <op>: <what>").
[[noreturn]] void fail(const char* backend, const char* op, const std::string& what);
inline void require(bool ok, const char* backend, const char* op, const char* what) {
  if (!ok) fail(backend, op, what);
}

// ---- One check per op, over its whole argument list. Buffers are required unless ops.h calls them
// optional (a few may be null where they would hold no element). Dtypes, per op family:

// linear: in, weight and d_out share one element type, F32 or BF16. out, d_in, d_weight are F32, or
// either when that type is BF16 (fp32 accumulation); bias has out's dtype; d_bias is either. Backward
// reads weight only for d_in and in only for d_weight.
void check_linear_forward(const char* backend, Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K);
void check_linear_backward(const char* backend, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                           Buf weight, int M, int N, int K);
// linear + GELU: the linear rules with pre as the linear's output (d_in), and GELU's with it: out has
// pre's dtype, d_pre and pre share one.
void check_linear_gelu_forward(const char* backend, Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M,
                               int N, int K);
void check_linear_input_grad_add(const char* backend, Buf d_in, Buf d_out, Buf weight, int M, int N, int K);
void check_linear_backward_gelu(const char* backend, Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                                Buf weight, Buf pre, int M, int N, int K);

// embedding: out, table and positions share one type; in backward d_out is either, d_table and
// d_positions share one. tokens are I32; the ids themselves are not read here (the CPU entry rejects
// negative ones, see ops.h).
void check_embedding_forward(const char* backend, Buf out, Buf tokens, Buf table, Buf positions, int N, int T,
                             int C);
void check_embedding_backward(const char* backend, Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N,
                              int T, int C);

// norms: in, out, d_out, d_in share one type X; weight and bias one type W; d_weight and d_bias one
// type G; each F32 or BF16. mean and rstd are F32.
void check_layernorm_forward(const char* backend, Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias,
                             int N, int C);
void check_layernorm_backward(const char* backend, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                              Buf weight, Buf mean, Buf rstd, int N, int C);
void check_rmsnorm_forward(const char* backend, Buf out, Buf rstd, Buf in, Buf weight, int N, int C);
void check_rmsnorm_backward(const char* backend, Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight,
                            Buf rstd, int N, int C);

// residual add + norm: the norm's rules with x_out as its input; a and b of x_out's type.
void check_add_layernorm_forward(const char* backend, Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b,
                                 Buf weight, Buf bias, int N, int C);
void check_add_rmsnorm_forward(const char* backend, Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight,
                               int N, int C);

// rope: x (d_x) is F32 or BF16; D even, theta > 0.
void check_rope_forward(const char* backend, Buf x, int B, int T, int H, int D, float theta);
void check_rope_backward(const char* backend, Buf d_x, int B, int T, int H, int D, float theta);

// attention: q, k, v, out and the d_ tensors share one type, F32 or BF16; lse is F32; the shape's sizes
// are not negative, Hq a multiple of Hkv, and there are keys for the queries to see (Tk > 0).
void check_attention_forward(const char* backend, Buf out, Buf lse, Buf q, Buf k, Buf v,
                             const AttentionShape& s);
void check_attention_backward(const char* backend, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v,
                              Buf out, Buf lse, const AttentionShape& s);
// attention_merge: out and part share one type, F32 or BF16, of B*T*H*D elements; lse and part_lse
// are F32 of B*H*T.
void check_attention_merge(const char* backend, Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H,
                           int D);

// activations: all buffers of an op share one type, F32 or BF16.
void check_gelu_forward(const char* backend, Buf out, Buf in, std::int64_t n);
void check_gelu_backward(const char* backend, Buf d_in, Buf d_out, Buf in, std::int64_t n);
void check_swiglu_forward(const char* backend, Buf out, Buf gate, Buf up, std::int64_t n);
void check_swiglu_backward(const char* backend, Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up,
                           std::int64_t n);

// elementwise: add's out, a, b share one type; accumulate's acc and x, and convert's dst and src, are
// each F32 or BF16 (F32 acc += BF16 x is the mixed-precision gradient case); scale and fill take either.
void check_add(const char* backend, Buf out, Buf a, Buf b, std::int64_t n);
void check_accumulate(const char* backend, Buf acc, Buf x, std::int64_t n);
void check_scale(const char* backend, Buf x, std::int64_t n);
void check_fill(const char* backend, Buf x, std::int64_t n);
void check_fill_normal(const char* backend, Buf x, std::int64_t rows, std::int64_t cols);
void check_convert(const char* backend, Buf dst, Buf src, std::int64_t n);

// cross entropy: logits and d_logits share one type; losses F32; targets I32 (a target >= V is found
// by the backend, which reads the targets where they are: ops.h says when it is reported).
void check_cross_entropy_forward_backward(const char* backend, Buf losses, Buf d_logits, Buf logits,
                                          Buf targets, int N, int V, int Vp);
// vocab-parallel cross entropy: as above; stats F32 ([N, 3], all_stats [shards, N, 3]).
void check_cross_entropy_shard_stats(const char* backend, Buf stats, Buf logits, Buf targets, int N, int V,
                                     int Vs, int shard);
void check_cross_entropy_shard_forward_backward(const char* backend, Buf losses, Buf d_logits, Buf logits,
                                                Buf all_stats, Buf targets, int N, int V, int Vs, int shard,
                                                int shards);

// moe: routing tensors as ops.h states (probs, weight, counts, d_weight F32; choice, slot I32; d_logits
// F32 or BF16); 1 <= k <= E, capacity >= 0, the experts here a non-empty range of the E. rows, x, src, out
// share one type, F32 or BF16.
void check_moe_route(const char* backend, Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits,
                     int B, int T, int E, int k, int capacity, int first_expert, int experts_here);
void check_moe_route_backward(const char* backend, Buf d_logits, Buf d_weight, Buf probs, Buf choice,
                              Buf weight, Buf counts, int B, int T, int E, int k);
void check_moe_scatter(const char* backend, Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight,
                       int N, int k, int R, int C);
void check_moe_combine(const char* backend, Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C);

// adamw_step: all F32 (fp32 master weights and optimizer state) but param_out (F32 or BF16, or
// null); step >= 1.
void check_adamw_step(const char* backend, Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                      int step);

// sum and sum_squares (`op` names which): out is F32 (one element), x is F32 or BF16.
void check_reduction(const char* backend, const char* op, Buf out, Buf x, std::int64_t n);

// abs_max: as check_reduction. fp8_round: out and x F32 or BF16 of one dtype, amax F32 (one element).
void check_abs_max(const char* backend, Buf amax, Buf x, std::int64_t n);
// An op's optional output amax (ops.h): F32 where given.
void check_output_amax(const char* backend, const char* op, Buf amax);
void check_fp8_round(const char* backend, Buf out, Buf x, Buf amax, std::int64_t n);
// fp8_cast: x F32 or BF16; out and out_t of one FP8 dtype (E4M3 or E5M2), at least one given; amax and
// inv_scale F32, record F32 or null, not amax. fp8_gemm: a and b FP8, not both E5M2; out F32 or BF16,
// bias (optional, not with accumulate) of out's dtype; inverse scales F32. fp8_gemm_gelu: as fp8_gemm
// with pre as its output, and out of pre's dtype.
void check_fp8_cast(const char* backend, Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax,
                    std::int64_t rows, std::int64_t cols);
void check_fp8_gemm(const char* backend, Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias,
                    int M, int N, int K, bool accumulate);
void check_fp8_gemm_gelu(const char* backend, Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale,
                         Buf bias, int M, int N, int K);

}  // namespace ptrain::kernels
