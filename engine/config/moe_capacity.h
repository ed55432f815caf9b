// The MoE block's sizes, pure functions of the job (model/moe_block.h runs them; the layer
// description sizes its tensors and GEMMs from them; config/fp8_cuda.h checks an expert GEMM's rows).
#pragma once

#include <cstdint>

#include "engine/config/job_spec.h"

namespace ptrain::config {

// The tokens of one sequence an expert takes (model/moe_block.h): min(seq_len, ceil(capacity_factor *
// top_k * seq_len / experts)); 0 for dense models.
int expert_capacity(const JobSpec& spec);
// Token slots the rank's E/ep local experts hold per microbatch of one MoE layer: each expert takes
// expert_capacity tokens of each sequence its ep group routes, micro_batch * ep sequences, static
// buffers (model/moe_block.h): E * micro_batch * capacity with ep over other ranks than the tp
// group (or ep = 1), and the local experts' E/t * micro_batch * capacity with the experts split
// over the tp group (ep = t); 0 for dense models.
std::int64_t expert_token_slots(const JobSpec& spec);
// The slots of one expert from one source rank (micro_batch * capacity as the engine runs it): the
// rows of one expert GEMM.
std::int64_t expert_block_rows(const JobSpec& spec);

}  // namespace ptrain::config
