// Host copies of the flat shards a rank keeps in its backend's memory: checkpoints are read and
// written from host memory. On the CPU backend the shards are host memory already and pass through,
// unless a copy of their own is asked for (checkpoint.async writes from a copy while training
// changes the shards; on a device backend that copy is page-locked, for the copies' speed).
#pragma once

#include <vector>

#include "engine/model/param_store.h"
#include "engine/runtime/pinned_range.h"
#include "kernels/ops.h"

namespace ptrain::train {

class ShardMirror {
 public:
  enum class Copy { WhereNeeded, Always };
  ShardMirror(const kernels::Ops& memory, std::vector<model::FlatShard> shards, Copy copy = Copy::WhereNeeded);
  // The same ranges, in host memory.
  const std::vector<model::FlatShard>& host() const { return host_; }
  // Whether host() mirrors exactly `shards` (the same ranges and buffers).
  bool mirrors(const std::vector<model::FlatShard>& shards) const;
  void download();  // the shards' current values into host()
  void upload();    // host() back into the shards
  double host_bytes() const;  // of the copy (0 where the shards pass through)

 private:
  bool passes_through() const { return storage_.empty(); }

  const kernels::Ops& memory_;
  std::vector<model::FlatShard> device_, host_;
  std::vector<std::vector<float>> storage_;  // behind host_ when the shards are not host memory
  std::vector<runtime::PinnedRange> pins_;   // storage_, page-locked for a device's copies
};

}  // namespace ptrain::train
