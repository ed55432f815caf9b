#include "engine/train/checkpoint_claim.h"

#include <exception>
#include <string>

#include "engine/ckpt/checkpoint.h"
#include "engine/ckpt/checkpoint_error.h"

namespace ptrain::train {

std::unique_ptr<ckpt::CheckpointDirLock> claim_checkpoint_dir(const config::JobSpec& spec, dist::Comm& comm) {
  if (spec.checkpoint.dir.empty()) return nullptr;
  std::unique_ptr<ckpt::CheckpointDirLock> lock;
  std::exception_ptr failure;
  std::string refusal;
  if (comm.rank() == 0) {
    try {
      lock = std::make_unique<ckpt::CheckpointDirLock>(spec.checkpoint.dir);
      if (spec.checkpoint.resume == config::Resume::Never) ckpt::refuse_starting_over(spec.checkpoint.dir);
    } catch (const std::exception& e) {
      failure = std::current_exception();
      refusal = e.what();
    }
  }
  comm.broadcast_string(comm.world_group(), refusal, 0);
  if (failure) std::rethrow_exception(failure);
  if (!refusal.empty()) throw ckpt::CheckpointError(spec.checkpoint.dir, "rank 0 cannot use it: " + refusal);
  return lock;
}

}  // namespace ptrain::train
