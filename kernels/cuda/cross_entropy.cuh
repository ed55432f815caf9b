// Softmax cross-entropy fused with its gradient on CUDA (see cross_entropy.cu). Semantics as ops.h.
#pragma once

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

// Never waits for the device: a row whose target is >= V gets a NaN loss and is recorded in
// ctx.bad_target (the first such row by index, with its target), which the next copy_to_host reads.
void cross_entropy_forward_backward(const LaunchContext& ctx, Buf losses, Buf d_logits, Buf logits,
                                    Buf targets, int N, int V, int Vp, float grad_scale);

// Vocab-parallel cross-entropy (ops.h), never waiting either: a target >= V is recorded as above.
void cross_entropy_shard_stats(const LaunchContext& ctx, Buf stats, Buf logits, Buf targets, int N, int V,
                               int Vs, int shard);
void cross_entropy_shard_forward_backward(const LaunchContext& ctx, Buf losses, Buf d_logits, Buf logits,
                                          Buf all_stats, Buf targets, int N, int V, int Vs, int shard,
                                          int shards, float grad_scale);

// The read-back of that record: queue_bad_target_readback before the stream is synchronised, then
// throw_if_bad_target, which throws std::invalid_argument naming the op, row and target if one was
// recorded since the last check (and clears the record).
void queue_bad_target_readback(const LaunchContext& ctx);
void throw_if_bad_target(const LaunchContext& ctx);

}  // namespace ptrain::kernels::cuda
