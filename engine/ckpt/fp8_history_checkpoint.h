// Delayed scaling's amax histories (model/fp8_history.h) in the checkpoint format (checkpoint.h):
// one tensor, kFp8HistoryTensor [layers, 7 linear layers, 3 cast tensors, amax_history], newest
// first. Every rank holds the whole model's histories, so rank 0 saves them and any layout
// restores them; a resume is then exact (the first step after it scales as the saved run's would).
#pragma once

#include <string>
#include <vector>

#include "engine/ckpt/checkpoint.h"
#include "engine/model/fp8_history.h"

namespace ptrain::ckpt {

inline constexpr const char* kFp8HistoryTensor = "fp8/amax_history";

// The shard rank 0 saves: the whole tensor, pointing into `history` (unchanged until written).
TensorShard fp8_history_shard(const model::Fp8History& history);

// Restores `history` from `ckpt` where it holds one; returns the notes a resume prints (none when
// restored as saved): no histories (a checkpoint of bf16 or current scaling: the first step scales
// by current amaxes), or another amax_history length (the newest entries that fit are kept).
// CheckpointError where the tensor's shape is not that of this model's histories.
std::vector<std::string> restore_fp8_history(LoadedCheckpoint& ckpt, model::Fp8History& history);

}  // namespace ptrain::ckpt
