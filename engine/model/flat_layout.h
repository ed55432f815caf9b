// The flat layout of a rank's parameters: one description that model::ParamStore allocates and
// validate counts (plan::count_rank_params), so the two cannot drift apart.
//
// Each tensor starts kFlatAlignment-element (64-byte) aligned, and the tensors of one unit (the
// embedding, a layer, the final norm with the head) are contiguous, in registry order. Every unit's
// size is padded to a multiple of its kind's: the ZeRO ranks that shard it times kFlatAlignment, so
// ZeRO splits each unit evenly. Under expert parallelism, or tensor parallelism (whose ranks each run
// the experts on their own tokens, model/moe_block.h), a layer's experts form a unit of their own,
// right after the layer's (experts_apart): ZeRO shards and reduces them over the expert-dp group
// (tp*cp*dp/ep ranks), not the dp-cp group.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/param_registry.h"

namespace ptrain::model {

inline constexpr std::int64_t kFlatAlignment = 16;
inline bool experts_apart(int tp, int ep) { return ep > 1 || tp > 1; }
inline bool experts_apart(const ShardCoords& coords) { return experts_apart(coords.tp, coords.ep); }

struct FlatRange {  // elements [begin, end) of the flat layout
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

struct FlatLayout {
  // Per tensor of the rank's local_params(...), in their order: where it starts, and its unit.
  std::vector<std::int64_t> offsets;
  std::vector<int> tensor_unit;
  // Per unit, in layout order: its padded range, whether it holds a layer's experts apart, and the
  // model chunk of a layer's unit (-1 for the embedding's and the final one).
  std::vector<FlatRange> units;
  std::vector<bool> expert;
  std::vector<int> chunk;
  int embedding = -1, final = -1;  // those units, -1 where the rank has none
  bool tied = false;               // the rank's head reuses an embedding
  std::int64_t numel = 0;          // padding included
  int count() const { return static_cast<int>(units.size()); }
};

// `local`: local_params(...) of one rank. `dense_multiple`, `expert_multiple`: what each kind of
// unit's size is a multiple of (positive multiples of kFlatAlignment; std::invalid_argument if not).
FlatLayout flat_layout(const std::vector<LocalParam>& local, std::int64_t dense_multiple,
                       std::int64_t expert_multiple, bool experts_apart);

}  // namespace ptrain::model
