#include "engine/ckpt/fp8_history_checkpoint.h"

#include <algorithm>

#include "engine/ckpt/checkpoint_error.h"

namespace ptrain::ckpt {

TensorShard fp8_history_shard(const model::Fp8History& history) {
  TensorShard shard;
  shard.name = kFp8HistoryTensor;
  shard.global_shape = history.saved_shape();
  shard.stored_shape = shard.global_shape;
  append_range(shard.runs, 0, static_cast<std::int64_t>(history.saved().size()));
  shard.data = history.saved().data();
  return shard;
}

std::vector<std::string> restore_fp8_history(LoadedCheckpoint& ckpt, model::Fp8History& history) {
  if (!ckpt.has_tensor(kFp8HistoryTensor))
    return {"note: " + ckpt.path() +
            " holds no FP8 amax histories (saved without delayed scaling): the first step scales by its "
            "current amaxes"};
  const std::vector<std::int64_t>& shape = ckpt.tensor_shape(kFp8HistoryTensor);
  const std::vector<std::int64_t> expected = history.saved_shape();
  if (shape.size() != 4 || shape[0] != expected[0] || shape[1] != expected[1] || shape[2] != expected[2] ||
      shape[3] < 1)
    throw CheckpointError(ckpt.path(), std::string(kFp8HistoryTensor) + " is not this model's amax histories (" +
                                           std::to_string(expected[0]) + " layers x " +
                                           std::to_string(expected[1]) + " x " + std::to_string(expected[2]) +
                                           " x amax_history)");
  history.restore(ckpt.read_tensor(kFp8HistoryTensor), shape[3]);
  if (shape[3] == expected[3]) return {};
  return {"note: the checkpoint's FP8 amax histories hold " + std::to_string(shape[3]) +
          " steps, train.fp8.amax_history is " + std::to_string(expected[3]) + ": the newest " +
          std::to_string(std::min(shape[3], expected[3])) + " are kept"};
}

}  // namespace ptrain::ckpt
