// Test support: the global flat index of every element of a tp rank's slice of a parameter, in its
// local storage order, one per element (what model::for_each_tp_block walks in blocks).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/param_registry.h"

namespace ptrain::test {

inline std::vector<std::int64_t> global_indices(const model::ParamInfo& info, int tp_rank, int tp) {
  std::vector<std::int64_t> out;
  model::for_each_tp_block(info, tp_rank, tp, [&](std::int64_t start, std::int64_t length) {
    for (std::int64_t i = start; i < start + length; ++i) out.push_back(i);
  });
  return out;
}

}  // namespace ptrain::test
