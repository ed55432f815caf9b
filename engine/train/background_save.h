// checkpoint.async (docs/faults.md, "Asynchronous checkpoints"): a save whose rank file is written on
// a thread of its own while training goes on. At the save the training thread copies the rank's
// shards into host memory the save keeps from one save to the next (ShardMirror, Copy::Always:
// page-locked on a device backend) and hands their tensors to the thread, which writes them with
// write_rank_file as the synchronous save does. The cross-rank part of the protocol (rank 0 gathers
// the reports, commits, says how the save ended) stays on the training thread
// (trainer_checkpoint.cpp): no collective ever runs on the writer's thread. At most one save is in
// flight.
//
// What is left on the training thread is the copy alone: the copy's memory is allocated at start-up
// (prepare), its pages faulted in on the writer's thread while the first steps run, and rank 0's
// removal of older checkpoints after a commit runs there too (after_commit): a 2.7 GB step directory
// took 0.9-1.0 s to remove on this project's CI-sized machine.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/ckpt/checkpoint.h"
#include "engine/model/fp8_history.h"
#include "engine/model/param_store.h"
#include "engine/runtime/ordered_worker.h"
#include "engine/train/shard_mirror.h"
#include "kernels/ops.h"

namespace ptrain::train {

inline constexpr const char* kSaveFailed = "failed: ";  // a save report without a rank file

// A report saying rank `rank`'s file was not written, and why.
std::string failed_report(int rank, const std::exception& why);
// Writes rank `rank`'s file of step `step` into `tmp_dir` and returns its report to rank 0: the
// RankFileInfo as JSON, or kSaveFailed and why (then `failure` holds the exception).
std::string write_rank_report(const std::string& tmp_dir, int rank, std::int64_t step,
                              const std::vector<ckpt::TensorShard>& tensors, std::exception_ptr& failure);

class BackgroundSave {
 public:
  // One save: what rank 0 commits, and how this rank's write ended.
  struct Pending {
    std::int64_t step = 0;
    std::string tmp_dir;         // where every rank writes, as rank 0 began it
    nlohmann::json state;        // the manifest's trainer state, taken at the save
    std::string report;          // write_rank_report's, once written
    std::exception_ptr failure;  // this rank's write's
  };

  explicit BackgroundSave(const kernels::Ops& memory) : memory_(memory) {}
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;
  ~BackgroundSave() = default;  // waits for a write in flight (the worker's destructor)

  // Allocates the copy of `shards` ahead of the first save (once, at start-up): on the writer's thread
  // where the copy is plain host memory (faulting its pages in while training goes on), else here
  // (page-locking it).
  void prepare(const std::vector<model::FlatShard>& shards);
  // Copies `shards` (in the backend's memory) and `fp8_history` (nullptr: none) into the host copy
  // and returns the tensors of the copy to write. The copy is allocated again should the shards have
  // moved since prepare(). None may be in flight; waits for the writer's other work (prepare's,
  // after_commit's).
  std::vector<ckpt::TensorShard> copy(const model::ParamStore& params, const std::vector<model::FlatShard>& shards,
                                      const model::Fp8History* fp8_history);
  // Starts writing `tensors` (copy()'s) as rank `rank`'s file of `save` on the writer's thread; a
  // save whose copy failed (save.failure set) writes nothing and is finished as a failed write.
  void start(Pending save, int rank, std::vector<ckpt::TensorShard> tensors);
  // Runs `work` on the writer's thread once the save is committed (rank 0's pruning of older steps):
  // best effort, like the pruning it runs; its failure is dropped. None may be in flight.
  void after_commit(std::function<void()> work);

  bool in_flight() const { return pending_.has_value(); }
  std::int64_t step() const { return pending_->step; }  // of the save in flight
  bool writing();  // the save in flight has not finished writing this rank's file
  double wait();   // waits until the writer is idle (the save in flight written, other work done); seconds
  Pending take();  // the save in flight once written (waits); none is in flight after

 private:
  const kernels::Ops& memory_;
  std::optional<ShardMirror> mirror_;  // the copy of the shards
  std::exception_ptr allocation_failure_;  // prepare's, for the next copy() to report
  std::vector<float> history_;         // of the FP8 amax histories
  std::optional<Pending> pending_;
  runtime::OrderedWorker writer_;  // last: its destructor waits for the write, which reads the above
};

}  // namespace ptrain::train
