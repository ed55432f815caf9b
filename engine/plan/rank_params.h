// What one rank holds of the model, in elements, as the memory and communication models need it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/param_registry.h"

namespace ptrain::plan {

struct RankParams {
  std::int64_t dense = 0;         // non-expert elements (ZeRO shards them over dp-cp)
  std::int64_t expert = 0;        // expert elements (ZeRO shards them over expert-dp = tp*cp*dp/ep)
  std::int64_t largest_unit = 0;  // the biggest layer, embedding or head here (ZeRO-3 gathers one at a time)
  std::int64_t tied_embedding = 0;  // word-embedding copy whose grad is all-reduced over the embedding group
  std::int64_t total() const { return dense + expert; }
};

// Precondition: `local` is local_params(...) of one rank with pipeline size `pp`.
RankParams count_rank_params(const std::vector<model::LocalParam>& local, int pp);

}  // namespace ptrain::plan
