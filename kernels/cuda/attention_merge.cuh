// Ring attention's merge of two attentions of the same queries over disjoint keys on CUDA (see
// attention_merge.cu). Semantics as ops.h attention_merge; kernels/cpu/attention_merge.cpp is the
// reference.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/buffer.h"

namespace ptrain::kernels::cuda {

// out, part: [B, T, H, D] F32 or BF16 (one type); lse, part_lse: [B, H, T] F32. Enqueued on `stream`;
// argument errors throw std::invalid_argument before anything is enqueued.
void attention_merge(cudaStream_t stream, Buf out, Buf lse, Buf part, Buf part_lse, int B, int T, int H,
                     int D);

}  // namespace ptrain::kernels::cuda
