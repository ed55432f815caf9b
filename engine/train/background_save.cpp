#include "engine/train/background_save.h"

#include <chrono>
#include <stdexcept>
#include <utility>

#include "engine/ckpt/fp8_history_checkpoint.h"
#include "engine/ckpt/param_checkpoint.h"

namespace ptrain::train {

std::string failed_report(int rank, const std::exception& why) {
  return kSaveFailed + ("rank " + std::to_string(rank) + ": " + why.what());
}

std::string write_rank_report(const std::string& tmp_dir, int rank, std::int64_t step,
                              const std::vector<ckpt::TensorShard>& tensors, std::exception_ptr& failure) {
  try {
    return ckpt::to_json(ckpt::write_rank_file(tmp_dir, rank, step, tensors)).dump();
  } catch (const std::exception& e) {
    failure = std::current_exception();
    return failed_report(rank, e);
  }
}

void BackgroundSave::prepare(const std::vector<model::FlatShard>& shards) {
  if (mirror_ || in_flight()) throw std::logic_error("BackgroundSave::prepare: once, before the first save");
  if (memory_.device() != kernels::Device::Cpu) {  // page-locking faults the pages in anyway
    mirror_.emplace(memory_, shards, ShardMirror::Copy::Always);
    return;
  }
  // Host memory: the mirror's zero-filled buffers are its first touch of every page (0.2-12 s for
  // 6 GB on this project's VMs), made on the writer's thread; copy() waits for it, should the first
  // save come first. A failure (no memory) is copy()'s to report, at that save, as a failed write.
  writer_.start(1, [this, shards](int) {
    try {
      mirror_.emplace(memory_, shards, ShardMirror::Copy::Always);
    } catch (...) {
      allocation_failure_ = std::current_exception();
    }
  });
}

std::vector<ckpt::TensorShard> BackgroundSave::copy(const model::ParamStore& params,
                                                    const std::vector<model::FlatShard>& shards,
                                                    const model::Fp8History* fp8_history) {
  if (in_flight()) throw std::logic_error("BackgroundSave::copy: a save is in flight");
  writer_.wait_all();  // prepare's allocation, after_commit's work
  if (allocation_failure_) std::rethrow_exception(std::exchange(allocation_failure_, nullptr));
  if (!mirror_ || !mirror_->mirrors(shards)) {
    mirror_.reset();  // the old copy goes before the new one is allocated
    mirror_.emplace(memory_, shards, ShardMirror::Copy::Always);
  }
  mirror_->download();
  std::vector<ckpt::TensorShard> tensors = ckpt::flat_shard_tensors(params, mirror_->host());
  if (fp8_history != nullptr) {
    history_ = fp8_history->saved();
    ckpt::TensorShard shard = ckpt::fp8_history_shard(*fp8_history);
    shard.data = history_.data();
    tensors.push_back(std::move(shard));
  }
  return tensors;
}

void BackgroundSave::start(Pending save, int rank, std::vector<ckpt::TensorShard> tensors) {
  if (in_flight()) throw std::logic_error("BackgroundSave::start: a save is in flight");
  pending_ = std::move(save);
  Pending* pending = &*pending_;  // read by the training thread only once the write is done (wait)
  writer_.start(1, [pending, rank, tensors = std::move(tensors)](int) {
    if (!pending->failure)  // else the copy failed, and the report says so
      pending->report = write_rank_report(pending->tmp_dir, rank, pending->step, tensors, pending->failure);
  });
}

void BackgroundSave::after_commit(std::function<void()> work) {
  if (in_flight()) throw std::logic_error("BackgroundSave::after_commit: a save is in flight");
  writer_.start(1, [work = std::move(work)](int) {
    try {
      work();
    } catch (const std::exception&) {  // best effort: the step is committed whatever happens here
    }
  });
}

bool BackgroundSave::writing() { return in_flight() && !writer_.done(-1); }

double BackgroundSave::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  writer_.wait_all();  // the task catches its failures: they are in the report
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

BackgroundSave::Pending BackgroundSave::take() {
  if (!in_flight()) throw std::logic_error("BackgroundSave::take: no save in flight");
  wait();
  Pending done = std::move(*pending_);
  pending_.reset();
  return done;
}

}  // namespace ptrain::train
