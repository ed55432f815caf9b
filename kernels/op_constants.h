// Constants of the op contract (ops.h) that code which never runs an op needs too: validate's
// memory and traffic models count the cross-entropy statistics a vocab shard sends, without
// including the whole op set.
#pragma once

#include <cstdint>

namespace ptrain::kernels {

// The token id of a row another tensor-parallel rank holds (embedding_forward/backward).
inline constexpr std::int32_t kRowElsewhere = INT32_MIN;
// F32 values per token of a vocab shard's cross-entropy stats (cross_entropy_shard_stats).
inline constexpr int kCrossEntropyShardStats = 3;

}  // namespace ptrain::kernels
