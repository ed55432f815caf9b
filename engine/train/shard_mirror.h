// Host copies of the flat shards a rank keeps in its backend's memory: checkpoints are read and
// written from host memory. On the CPU backend the shards are host memory already and pass through.
#pragma once

#include <vector>

#include "engine/model/param_store.h"
#include "kernels/ops.h"

namespace ptrain::train {

class ShardMirror {
 public:
  ShardMirror(const kernels::Ops& memory, std::vector<model::FlatShard> shards);
  // The same ranges, in host memory.
  const std::vector<model::FlatShard>& host() const { return host_; }
  void download();  // the shards' current values into host()
  void upload();    // host() back into the shards

 private:
  const kernels::Ops& memory_;
  std::vector<model::FlatShard> device_, host_;
  std::vector<std::vector<float>> storage_;  // behind host_ when the shards are not host memory
};

}  // namespace ptrain::train
