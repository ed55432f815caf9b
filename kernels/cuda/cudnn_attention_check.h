// The first run of each cuDNN attention plan (cudnn_attention.h) checked against ptrain's own
// kernels (attention.cuh) on the same inputs, before cuDNN's numbers are trusted for the shape: a
// cuDNN version, GPU or shape whose fused kernels compute something else then costs speed, never
// correctness. Once per plan: ptrain's kernels write into stream-ordered scratch, both results are
// copied to the host (the stream synchronised: the first step only), compared with the tolerance the
// attention tests give BF16 (|got - ref| <= 1e-2 max(1, max |ref|) + 2e-2 |ref|), and the scratch
// pool is trimmed back so the check leaves no memory behind.
// In PTRAIN_CUDNN_ATTENTION=auto the same module times ptrain's kernels on the shape, for the choice
// between the two (cudnn_attention.h).
#pragma once

#include <functional>
#include <string>

#include "kernels/attention_shape.h"
#include "kernels/buffer.h"
#include "kernels/cuda/launch_context.h"

namespace ptrain::kernels::cuda {

// Empty when cuDNN's out and lse (lse may be null: not compared) agree with ptrain's forward; else
// which tensor differed, where and by how much.
std::string check_attention_forward_against_own(const LaunchContext& ctx, Buf out, Buf lse, Buf q, Buf k,
                                                Buf v, const AttentionShape& s);

// The same for cuDNN's d_q, d_k, d_v against ptrain's backward (which reads the same out and lse).
std::string check_attention_backward_against_own(const LaunchContext& ctx, Buf d_q, Buf d_k, Buf d_v,
                                                 Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                                                 const AttentionShape& s);

// Seconds `run` takes on ctx's stream: after one untimed run (which pays for loading the kernels),
// the mean of three back to back between two CUDA events (so the host's enqueueing overlaps the
// GPU's running, and a short kernel is not timed with its launch); waits for the stream.
double time_on_stream(const LaunchContext& ctx, const std::function<void()>& run);

// time_on_stream of ptrain's own forward, resp. backward, of the shape on these inputs, into
// stream-ordered scratch (the pool trimmed back after).
double own_attention_forward_seconds(const LaunchContext& ctx, Buf q, Buf k, Buf v, const AttentionShape& s);
double own_attention_backward_seconds(const LaunchContext& ctx, Buf d_out, Buf q, Buf k, Buf v, Buf out, Buf lse,
                                      const AttentionShape& s);

}  // namespace ptrain::kernels::cuda
