// Causal self-attention with grouped-query heads on CUDA: own flash-attention kernels (FlashAttention-2
// structure), forward and backward, F32 and BF16. The contract is ops.h's attention_forward /
// attention_backward (kernels/attention_shape.h):
//   q, out: [B, Tq, Hq, D]; k, v: [B, Tk, Hkv, D]  (element (b, t, h, d) at ((b*T + t)*H + h)*D + d)
//   query row i sits at position q_pos0 + i and sees keys 0 .. min(q_pos0 + i, Tk - 1): causal where the
//   positions overlap, every key where the queries come after them all (a ring attention block)
//   lse: [B, Hq, Tq] F32, the natural-log log-sum-exp of each scaled softmax row (optional in forward)
//   query head h reads kv head h / (Hq / Hkv); scale 1/sqrt(D); no Tq x Tk matrix anywhere.
//   Backward overwrites d_q, d_k, d_v (d_k, d_v sum over the query heads of their group; keys no
//   query sees get zeros).
// Dtypes: q, k, v, out, d_out, d_q, d_k, d_v all F32 or all BF16 (math and accumulation in fp32).
// Head dim: any multiple of 8 up to 256 (kCudaMaxHeadDim; tiles are padded to 32, 64, 80, 96, 128, 160,
// 192, 224 or 256); anything else throws std::invalid_argument. BF16 tensors must be 16-byte aligned (cp.async); T is arbitrary.
//
// Scratch: none. The backward's per-row D_i = dot(d_out_i, out_i) is parked in the first 4 bytes of
// the d_q row (b, i, h) it belongs to, and for head dims above 128 also at its first column of the
// second half (d_q is overwritten anyway; each slot is read back before the CTA that owns it writes it), so the op needs no workspace and is safe on any stream / thread.
// d_q must therefore not alias another argument (ops.h allows no aliasing for attention).
//
// All work is enqueued on `stream`; nothing synchronises the host. Argument errors throw
// std::invalid_argument("cuda attention_forward: ...") before anything is enqueued; CUDA errors
// throw std::runtime_error (PTRAIN_CUDA_CHECK).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/attention_shape.h"
#include "kernels/buffer.h"

namespace ptrain::kernels::cuda {

void attention_forward(cudaStream_t stream, Buf out, Buf lse, Buf q, Buf k, Buf v, const AttentionShape& s);

void attention_backward(cudaStream_t stream, Buf d_q, Buf d_k, Buf d_v, Buf d_out, Buf q, Buf k, Buf v,
                        Buf out, Buf lse, const AttentionShape& s);

}  // namespace ptrain::kernels::cuda
