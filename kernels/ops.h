// The op set the engine calls. Each op has a CPU implementation (kernels/cpu) and a CUDA one
// (kernels/cuda, the CUDA issue) behind this one interface; the engine holds a `const Ops&`.
//
// Conventions (every op):
//  - Row-major, contiguous. Linear weights are [out, in] (y = x W^T + b).
//  - Activations are [N, C] with N = B*T tokens (token n = b*T + t), attention tensors [B, T, H, D].
//  - `*_backward` ops ACCUMULATE (+=) into parameter gradients (d_weight, d_bias, d_table) so
//    microbatches accumulate, and OVERWRITE activation gradients (d_in, d_x) unless noted.
//  - Optional arguments are Bufs with a null ptr. Outputs called optional below are skipped when
//    null (a frozen parameter, a loss-only evaluation, a forward whose stats are not needed).
//  - Misuse is a programming error: a wrong dtype, a missing required buffer, a negative size or an
//    impossible shape throws std::invalid_argument naming the op; nothing aborts.
//  - An output may alias an input only where noted (and then element for element, never shifted).
//  - Stats (mean, rstd, lse, losses) are always F32; tokens/targets are I32.
//  - Float buffers are F32 or BF16 (stores to BF16 round to nearest even). Which arguments may be
//    BF16, and which must share a dtype, is the same on every backend: kernels/op_checks.h states the
//    rules and checks them, one function per op that every backend's entry calls; adamw_step is F32
//    only (fp32 master weights). The CPU computes BF16 as fp32 math on the bf16 values with each output
//    rounded once (kernels/cpu/bf16_staging.h): the reference the CUDA ops are tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kernels/adamw_step.h"
#include "kernels/attention_shape.h"
#include "kernels/buffer.h"
#include "kernels/fp8.h"
#include "kernels/op_constants.h"

namespace ptrain::kernels {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;

  // ---- linear layers: out[M,N] = in[M,K] @ weight[N,K]^T (+ bias[N])
  virtual void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) const = 0;
  // d_in[M,K] = d_out @ weight (overwrite; skipped if null); d_weight[N,K] += d_out^T @ in
  // (skipped if null); d_bias[N] += column sums of d_out (skipped if null).
  virtual void linear_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N,
                               int K) const = 0;
  // d_in[M,K] += d_out @ weight: the input gradient of a layer that shares its input with another
  // (attention's k and v projections read what q's reads), added in the GEMM itself (beta 1) rather
  // than written aside and added by a pass of its own. d_in is required; dtypes as linear_backward's.
  virtual void linear_input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K) const = 0;

  // ---- linear with the GELU that follows it fused in (an MLP's up projection; GELU as gelu_forward):
  // pre[M,N] = in @ weight^T (+ bias), out[M,N] = gelu(pre). pre, the GELU input kept for backward, is
  // an output too. Dtypes as linear_forward with pre as its output; out has pre's dtype. Neither output
  // may alias any argument. The CPU runs exactly linear_forward then gelu_forward (bit for bit the two
  // calls); CUDA fuses GELU into the GEMM's epilogue for BF16 outputs where cuBLASLt can, whose
  // evaluation of the same tanh formula agrees with gelu_forward to bf16's rounding; F32 outputs run
  // the two ops (kernels/cuda/linear.cu).
  virtual void linear_gelu_forward(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N,
                                   int K) const = 0;
  // ---- linear_backward of the layer whose input is in = gelu(pre) (an MLP's down projection), fused
  // with GELU's backward: d_pre[M,K] = (d_out @ weight) * gelu'(pre) (overwrite); d_weight += d_out^T @
  // in and d_bias += column sums of d_out, each optional as in linear_backward. d_pre and pre are
  // required and share one dtype, the one linear_backward allows for d_in. d_pre may alias no argument
  // (pre and in are read after the product is formed). The CPU runs exactly linear_backward with
  // d_in = d_pre (so d_out @ weight is rounded to d_pre's dtype) then gelu_backward in place; CUDA
  // applies gelu' in the d_pre GEMM's epilogue where cuBLASLt can.
  virtual void linear_backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight,
                                    Buf pre, int M, int N, int K) const = 0;

  // ---- embeddings: out[n,:] = table[tokens[n],:] (+ positions[n % T,:] when positions is given).
  // Token ids must be rows of the table: the op is not told the row count and rejects only ids < 0,
  // so the data loader bounds-checks tokens against the vocabulary. The one negative id it takes is
  // kRowElsewhere, a token whose row another tensor-parallel rank holds (vocab-parallel embedding):
  // its output row is the position row alone (zeros without positions), and backward skips it.
  virtual void embedding_forward(Buf out, Buf tokens, Buf table, Buf positions, int N, int T, int C) const = 0;
  // d_table[tokens[n],:] += d_out[n,:] (if given); d_positions[n % T,:] += d_out[n,:] (if given)
  virtual void embedding_backward(Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N, int T,
                                  int C) const = 0;

  // ---- An op's `amax` (F32, device memory, optional; where an FP8 linear layer reads the output
  // next: docs/fp8.md) receives, in the same pass, what abs_max(amax, output, n, false) would leave:
  // the largest |value| of the output as stored (in its dtype), NaN if any is. Only current FP8
  // scaling asks for it; the ops compute the same outputs with or without it.

  // ---- norms over the last dim C of [N, C]. Forward saves mean/rstd [N] (optional; rstd =
  // 1/sqrt(biased var + eps)); bias is optional; in backward d_in, d_weight, d_bias are optional.
  // `amax`: of out.
  virtual void layernorm_forward(Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias, int N, int C,
                                 float eps, Buf amax = {}) const = 0;
  // d_in += (accumulates: the residual stream's gradient flows through d_in)
  virtual void layernorm_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf mean,
                                  Buf rstd, int N, int C) const = 0;
  virtual void rmsnorm_forward(Buf out, Buf rstd, Buf in, Buf weight, int N, int C, float eps,
                               Buf amax = {}) const = 0;
  // d_in += (accumulates, as layernorm_backward)
  virtual void rmsnorm_backward(Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight, Buf rstd, int N,
                                int C) const = 0;

  // ---- residual add fused with the norm that follows it (one pass over the rows instead of two):
  // x_out = a + b (the residual stream, [N, C]), then out = layernorm(x_out) exactly as
  // layernorm_forward(out, mean, rstd, x_out, weight, bias, N, C, eps) computes it from the stored
  // x_out (so in BF16 the norm reads the rounded sum): x_out, out, mean and rstd hold bit for bit what
  // add(x_out, a, b, N*C) then that layernorm_forward leave, on the same backend. x_out may alias a or
  // b (out may alias nothing); mean, rstd and bias are optional. Dtypes as the norm's: x_out, a and b
  // have out's type. Backward is the norm's backward with in = x_out. `amax`: of out (not x_out).
  virtual void add_layernorm_forward(Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b, Buf weight,
                                     Buf bias, int N, int C, float eps, Buf amax = {}) const = 0;
  // The same with rmsnorm_forward(out, rstd, x_out, weight, N, C, eps).
  virtual void add_rmsnorm_forward(Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight, int N, int C,
                                   float eps, Buf amax = {}) const = 0;

  // ---- rotary position embedding, HF "rotate half" convention, in place on x[B,T,H,D]:
  // for i < D/2, angle = (pos0 + t) * theta^(-2i/D); (x_i, x_{i+D/2}) rotated by angle.
  virtual void rope_forward(Buf x, int B, int T, int H, int D, float theta, int pos0) const = 0;
  // The inverse rotation applied to the gradient, in place.
  virtual void rope_backward(Buf d_x, int B, int T, int H, int D, float theta, int pos0) const = 0;

  // ---- causal attention with grouped-query heads (Hq % Hkv == 0; query head h reads kv head
  // h / (Hq/Hkv)), scale 1/sqrt(D), of the shape `s` (attention_shape.h: q, out [B,Tq,Hq,D]; k, v
  // [B,Tk,Hkv,D]; query row i sees keys 0 .. s.q_pos0 + i). lse: [B,Hq,Tq] F32 (log-sum-exp of each
  // softmax row of the scaled scores, saved for backward: no Tq x Tk matrix is stored; optional in
  // forward).
  virtual void attention_forward(Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s) const = 0;
  // d_q, d_k, d_v overwritten (d_k, d_v rows no query sees: zero).
  virtual void attention_backward(Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                                  const AttentionShape& s) const = 0;
  // Folds the attention `part` of the same queries over other keys (with its log-sum-exp part_lse)
  // into out and lse: out = (e^lse out + e^part_lse part) / (e^lse + e^part_lse), lse = log of that
  // denominator. out, part: [B,T,H,D]; lse, part_lse: [B,H,T] F32. Ring attention's step.
  virtual void attention_merge(Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H, int D) const = 0;

  // ---- activations (n elements). Gradients overwrite; out may alias in, d_in may alias d_out.
  // GELU, tanh approximation (GPT-2 / HF "gelu_new").
  // `amax`: of out (a selective recompute's GELU rebuilds what fp8_gemm_gelu wrote).
  virtual void gelu_forward(Buf out, Buf in, std::int64_t n, Buf amax = {}) const = 0;
  // `amax`: of d_in.
  virtual void gelu_backward(Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax = {}) const = 0;
  // out = silu(gate) * up; `amax`: of out.
  virtual void swiglu_forward(Buf out, Buf gate, Buf up, std::int64_t n, Buf amax = {}) const = 0;
  // `amax` [2]: of d_gate, then of d_up.
  virtual void swiglu_backward(Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up, std::int64_t n,
                               Buf amax = {}) const = 0;

  // ---- elementwise (out may alias a or b)
  virtual void add(Buf out, Buf a, Buf b, std::int64_t n) const = 0;          // out = a + b
  virtual void accumulate(Buf acc, Buf x, std::int64_t n) const = 0;          // acc += x
  virtual void scale(Buf x, float factor, std::int64_t n) const = 0;          // x *= factor
  virtual void fill(Buf x, float value, std::int64_t n) const = 0;
  // x[r cols + c] = stddev * (standard normal sample number first + r row_stride + c of the Philox
  // stream `key`) for r < rows, c < cols, F32: the initial weights, drawn where they live and bitwise
  // alike on every backend (philox_normal.h); rows > 1 draws a tp rank's columns of a weight at once.
  virtual void fill_normal(Buf x, std::int64_t rows, std::int64_t cols, std::uint64_t key, std::uint64_t first,
                           std::uint64_t row_stride, float stddev) const = 0;
  // dst = src in dst's dtype, F32 or BF16 either way (fp32 master weights to their bf16 working copy,
  // bf16 gradients to fp32): F32 -> BF16 rounds to nearest even (NaN stays NaN, overflow gives inf),
  // BF16 -> F32 is exact, equal dtypes copy the bytes. dst and src must not overlap.
  virtual void convert(Buf dst, Buf src, std::int64_t n) const = 0;

  // ---- loss: softmax cross-entropy over logits[N, Vp] (the first V columns are real, the rest
  // vocab padding and ignored). losses[n] = -log softmax(logits[n])[targets[n]]; a target < 0 is
  // ignored (loss 0, a zero gradient row). d_logits[N, Vp] = grad_scale * (softmax - onehot), padding
  // columns 0 (may alias logits; null = loss only, e.g. for evaluation). A target >= V is misuse (the
  // data loader bounds-checks tokens) but found only where the targets are: the CPU throws from the
  // call; a device backend, which would have to wait for its kernel, gives that row a NaN loss and
  // throws from its next copy_to_host (the step's read-back), naming the op, the row and the target.
  virtual void cross_entropy_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf targets, int N, int V,
                                              int Vp, float grad_scale) const = 0;

  // ---- vocab-parallel cross-entropy (Megatron): each of `shards` tensor-parallel ranks holds the
  // logits of Vs consecutive columns of the padded vocabulary, shard r columns [r*Vs, (r+1)*Vs) (the
  // real ones are those < V). Two passes, with an all-gather of the stats between them:
  // cross_entropy_shard_stats writes stats[n] = {max, sum of e^{x - max}, x_target} over the shard's
  // real columns ([N, 3] F32; a shard of padding only: {-inf, 0}; x_target 0 unless the shard holds
  // the target). cross_entropy_shard_forward_backward reads every shard's stats (all_stats:
  // [shards, N, 3], shard order) and writes the row's loss, the same on every shard and as
  // cross_entropy_forward_backward's up to summation order, and this shard's d_logits = grad_scale *
  // (softmax - onehot) over its columns, padding 0 (may alias logits; null = loss only). Targets as
  // there: < 0 ignored, >= V misuse (reported as there).
  virtual void cross_entropy_shard_stats(Buf stats, Buf logits, Buf targets, int N, int V, int Vs,
                                         int shard) const = 0;
  virtual void cross_entropy_shard_forward_backward(Buf losses, Buf d_logits, Buf logits, Buf all_stats,
                                                    Buf targets, int N, int V, int Vs, int shard, int shards,
                                                    float grad_scale) const = 0;

  // ---- mixture of experts (Mixtral's sparse MoE block) with a per-sequence expert capacity.
  // moe_route: probs[N,E] = softmax(logits[N,E]) (both F32; probs may alias logits); each token's
  // k experts of highest probability (ties: the lower index) in choice[N,k] (I32, best first), and
  // their probabilities renormalised over the k in weight[N,k] (F32). Tokens n = b*T + t belong to
  // sequence b; an expert takes at most `capacity` (token, choice) pairs of one sequence, in position
  // order (a token's choices are distinct experts), and drops the rest: slot[N,k] (I32) is the row
  // that holds the pair in the buffer of experts [first_expert, first_expert + experts_here),
  // (e - first_expert)*(B*capacity) + b*capacity + i for the i-th pair of sequence b that expert e
  // keeps, or -1 when dropped or when e is not one of those. counts[B,E] (F32) = the pairs of sequence b
  // that chose expert e, dropped ones included (the load-balancing loss's token fractions).
  virtual void moe_route(Buf probs, Buf choice, Buf weight, Buf slot, Buf counts, Buf logits, int B, int T,
                         int E, int k, int capacity, int first_expert, int experts_here) const = 0;
  // d_logits[N,E] (F32 or BF16, overwrite) from d_weight[N,k] (F32: the loss's gradient at the
  // renormalised weights) and from the load-balancing loss aux_scale * sum_b E * sum_e (counts[b,e]/T) *
  // (sum_t probs[b*T+t,e] / T) (HF Mixtral's, per sequence; the counts are constants).
  virtual void moe_route_backward(Buf d_logits, Buf d_weight, Buf probs, Buf choice, Buf weight, Buf counts,
                                  int B, int T, int E, int k, float aux_scale) const = 0;
  // rows[slot[n,j]] = weight[n,j] * x[n,:] for every kept pair (slot >= 0), rows no pair holds 0 (rows
  // [R, C], overwritten; x [N, C] of rows' dtype; weight F32 [N,k], optional: 1). d_weight[n,j] =
  // <x[n,:], src[slot[n,j],:]> (F32 [N,k], 0 for a dropped pair; optional, then src may be null; src of
  // rows' dtype). The experts' input (dispatch: no weight) and the gradient of their output
  // (moe_combine's backward). Slots must be distinct and < R (moe_route's are).
  virtual void moe_scatter(Buf rows, Buf d_weight, Buf x, Buf src, Buf slot, Buf weight, int N, int k, int R,
                           int C) const = 0;
  // out[n,:] = sum over kept pairs j of weight[n,j] * rows[slot[n,j],:] (overwrite; weight optional:
  // 1; out and rows share one dtype): the experts' outputs combined (weights), or the gradient of
  // their input summed back to the tokens (no weights).
  virtual void moe_combine(Buf out, Buf rows, Buf slot, Buf weight, int N, int k, int C) const = 0;

  // ---- optimizer over a flat F32 range: decoupled weight decay (Loshchilov & Hutter) on the
  // gradient g = grad_scale * grad (the scaling a separate pass would do, same rounding):
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)
  // with step t >= 1 (t < 1 throws). param_out, unless null, also receives the updated p in its
  // dtype, F32 or BF16 (rounded as convert rounds): mixed precision's working copy in the same pass.
  virtual void adamw_step(Buf param, Buf grad, Buf m, Buf v, Buf param_out, std::int64_t n,
                          const AdamWStep& s) const = 0;

  // ---- reductions of n elements of x (F32 or BF16) to one F32 value left in the device's memory at
  // out[0], so the host need not wait for it (the engine reads a step's losses and gradient norms
  // back in one copy): summed in double in an order fixed by n alone (deterministic), rounded once.
  virtual void sum(Buf out, Buf x, std::int64_t n) const = 0;          // out[0] = sum of x
  virtual void sum_squares(Buf out, Buf x, std::int64_t n) const = 0;  // out[0] = sum of x^2

  // ---- FP8 (train.precision: fp8; the formats, rounding and scales of kernels/fp8.h).
  // amax[0] (F32, device memory) = the largest |x[i]| of n values (F32 or BF16), or, with `combine`,
  // the larger of that and amax[0] as it was (a history, a tensor cast in parts); NaN if any x[i] is.
  virtual void abs_max(Buf amax, Buf x, std::int64_t n, bool combine) const = 0;
  // out[i] = x[i] put on the FP8 grid of `format` under the power-of-two scale s = fp8_scale(amax[0]):
  // fp8_to_f32(f32_to_fp8(x[i] * s)) / s, in out's dtype, which is x's (F32 or BF16; exact in either:
  // a scaled FP8 value has at most four significant bits). What an FP8 GEMM with per-tensor scales
  // multiplies, so a GEMM of such operands is that GEMM's product up to its summation order. out may
  // alias x; amax is read on the device (no host sync).
  virtual void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format) const = 0;
  // The FP8 GEMM path (docs/fp8.md): each operand cast once to FP8 codes (buffers of dtype E4M3 or
  // E5M2, one byte an element) with its inverse scale, then multiplied with FP32 accumulation.
  // fp8_cast: s = fp8_scale(amax[0]) in the format of the codes' dtype; for x [rows, cols] (F32 or
  // BF16), out[r, c] = f32_to_fp8(x[r, c] * s) and out_t[c, r] the same codes transposed, each
  // optional (not both null; one FP8 dtype): the transposes are what the backward GEMMs read, see
  // fp8_gemm. inv_scale[0] = 1/s (F32; exact, s being a power of two): what fp8_gemm multiplies by.
  // With `record` (F32, optional), record[0] = max(record[0], the largest |x|), NaN if any x is:
  // delayed scaling's amax, taken in the same pass over x. amax is read on the device (no host
  // sync); record may not alias amax (the scale is read while the record is written).
  virtual void fp8_cast(Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax, std::int64_t rows,
                        std::int64_t cols) const = 0;
  // fp8_gemm: out[M,N] = (a[M,K] b[N,K]^T) * a_inv_scale[0] * b_inv_scale[0] (+ bias[N]); with
  // `accumulate`, out += that (then no bias: a gradient). Both operands are K-contiguous ("TN", the
  // only layout of cuBLASLt's FP8 GEMMs on sm_89/sm_90), so a linear layer's input gradient reads
  // the weight's transposed codes and its weight gradient the transposed output gradient and input.
  // a and b are E4M3 or E5M2, not both E5M2 (no FP8 tensor core multiplies two); out F32 or BF16,
  // bias of out's dtype, inverse scales F32. Products are exact on both backends. The CPU sums in
  // FP32: it decodes each code to its value times the inverse scale (exact) and runs linear_forward's
  // GEMM, so it computes bit for bit what linear_forward (linear_backward, linear_input_grad_add
  // for the transposed operands) computes over fp8_round's operands, whatever `sums` says. CUDA
  // (cuBLASLt) sums in its own order, as `sums` asks (kernels/fp8.h). out may alias nothing.
  virtual void fp8_gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K,
                        bool accumulate, Fp8Sums sums) const = 0;
  // fp8_gemm_gelu: pre = fp8_gemm(a, b) (+ bias), out = gelu(pre), as linear_gelu_forward is
  // linear_forward then gelu_forward (the CPU runs exactly those two; CUDA puts GELU in the GEMM's
  // epilogue where cuBLASLt can, as linear_gelu_forward does). pre and out share one dtype, F32 or
  // BF16, and alias nothing. (The backward's gelu' runs as gelu_backward after the fp8_gemm: see
  // kernels/cuda/fp8_gemm.cu.) `sums` as fp8_gemm's; `amax`: of out.
  virtual void fp8_gemm_gelu(Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M,
                             int N, int K, Fp8Sums sums, Buf amax = {}) const = 0;

  // ---- memory of this backend's device: every buffer the engine computes on comes from here.
  // allocate: zero-filled, at least 256-byte aligned, never null (throws std::bad_alloc or the
  // backend's error); release(nullptr) does nothing.
  virtual void* allocate(std::size_t bytes) const = 0;
  virtual void release(void* ptr) const = 0;
  // Copies ordered with the ops: copy_to_device may return before the copy is done (the host
  // memory may be reused at once) and does not wait for the device; copy_to_host returns once the
  // bytes are on the host, so it waits for everything enqueued before it.
  virtual void copy_to_device(Buf dst, const void* host, std::size_t bytes) const = 0;
  virtual void copy_to_host(void* host, Buf src, std::size_t bytes) const = 0;
  virtual void copy(Buf dst, Buf src, std::size_t bytes) const = 0;  // within the device
  // Host memory the optimizer offload streams through (zero/data_parallel.h): pin_host
  // page-locks [host, host + bytes) so that the device's copies of it are DMA at full speed
  // (cudaHostRegister), until unpin_host(host), which never throws. Nothing to do on the CPU.
  virtual void pin_host(void* host, std::size_t bytes) const {
    static_cast<void>(host);
    static_cast<void>(bytes);
  }
  virtual void unpin_host(void* host) const { static_cast<void>(host); }
  // Two markers (below) around work on one stream; 0 where none was recorded.
  struct MarkerSpan {
    std::uint64_t from = 0, to = 0;
  };
  // An upload beside the compute stream: copies `bytes` of pinned host memory to `dst` on a copy
  // stream, after everything enqueued on the compute stream so far, and returns a ticket; ops
  // enqueued after await_upload(ticket) (once per ticket) see the bytes. Until then neither the
  // host bytes nor `dst` may change. With `timed`, markers on the copy stream around the copy go
  // there (the trace's copy track). Default (the CPU): copy_to_device, ticket 0, no markers.
  virtual std::uint64_t upload_async(Buf dst, const void* host, std::size_t bytes,
                                     MarkerSpan* timed = nullptr) const {
    static_cast<void>(timed);
    copy_to_device(dst, host, bytes);
    return 0;
  }
  virtual void await_upload(std::uint64_t ticket) const { static_cast<void>(ticket); }
  // `rows` rows of `width` bytes within the device, row r from src + r * src_pitch to
  // dst + r * dst_pitch (pitches in bytes, each at least width; the regions do not overlap).
  virtual void copy_rows(Buf dst, std::size_t dst_pitch, Buf src, std::size_t src_pitch, std::size_t width,
                         std::size_t rows) const = 0;
  // ---- the device's own timeline (logging.trace's device tracks): a marker enqueued on a stream,
  // timed when the device passes it (CUDA events). record_marker returns its id; `stream` is a
  // stream of this backend's device (a cudaStream_t: the NCCL backend's streams), nullptr the
  // compute stream. The CPU runs each op on the calling thread, has no timeline of its own and
  // returns 0 (no marker). marker_seconds: device seconds from marker `from` to marker `to`, of any
  // streams, waiting until `to` has passed; release_marker(id) gives a marker back (0 is ignored).
  virtual std::uint64_t record_marker(const void* stream = nullptr) const {
    static_cast<void>(stream);
    return 0;
  }
  virtual double marker_seconds(std::uint64_t from, std::uint64_t to) const {
    static_cast<void>(from);
    static_cast<void>(to);
    return 0.0;
  }
  virtual void release_marker(std::uint64_t marker) const { static_cast<void>(marker); }
  // Bytes of the device's memory in use now beyond what was in use when the backend started (its
  // buffers, pools, library workspaces and communication buffers: what the job really costs on the
  // device; other processes on the same device count too), for reporting. nullopt where not
  // measured: on the CPU the engine's own count of its buffers is the answer.
  virtual std::optional<std::int64_t> device_bytes_in_use() const { return std::nullopt; }
};

// The CPU implementation (OpenBLAS GEMMs, OpenMP elsewhere); stateless, lives for the program.
const Ops& cpu_ops();

}  // namespace ptrain::kernels
