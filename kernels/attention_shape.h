// The shape of one causal attention call (ops.h attention_forward / attention_backward).
//
// q, out: [B, Tq, Hq, D]; k, v: [B, Tk, Hkv, D]; lse: [B, Hq, Tq]. The keys hold positions
// 0 .. Tk - 1 of a sequence and the queries positions q_pos0 .. q_pos0 + Tq - 1; query row i sees
// keys 0 .. min(q_pos0 + i, Tk - 1): the causal diagonal where the two overlap, every key where
// the queries come after them all (q_pos0 >= Tk - 1: a block of ring attention with an earlier
// chunk's keys). Keys past the last query's position are seen by none (their gradients are zero).
// Self-attention over whole sequences is self_attention(B, T, ...): Tq = Tk = T, q_pos0 = 0.
// Context parallelism attends each chunk of a rank's queries to the keys of the chunks before it
// (parallel/context_parallel.h).
#pragma once

#include <cstdint>

namespace ptrain::kernels {

// The head dims the CUDA attention kernels take: multiples of kCudaHeadDimStep up to kCudaMaxHeadDim
// (as FlashAttention and cuDNN); the CPU op takes any. The config rules check backend-cuda jobs
// against them.
inline constexpr int kCudaHeadDimStep = 8;
inline constexpr int kCudaMaxHeadDim = 256;

struct AttentionShape {
  int B = 0, Tq = 0, Tk = 0, q_pos0 = 0, Hq = 0, Hkv = 0, D = 0;

  static AttentionShape self_attention(int B, int T, int Hq, int Hkv, int D) {
    return {B, T, T, 0, Hq, Hkv, D};
  }
  std::int64_t q_elements() const { return std::int64_t{B} * Tq * Hq * D; }    // of q, out, d_q, d_out
  std::int64_t kv_elements() const { return std::int64_t{B} * Tk * Hkv * D; }  // of k, v, d_k, d_v
  std::int64_t lse_elements() const { return std::int64_t{B} * Hq * Tq; }
};

}  // namespace ptrain::kernels
