// NcclComm against hangs and errors (nccl_comm_impl.h): issuing and waiting bounded by the timeout,
// the watchdog thread over what runs on the device, and aborting every communicator.
#include "engine/comm/nccl_comm_impl.h"

#include "engine/comm/nccl_calls.h"

namespace ptrain::dist {

using namespace nccl;  // nccl_calls.h

namespace {

constexpr auto kWatchPeriod = std::chrono::milliseconds(100);

}  // namespace

// An error unwinds past device work in flight (a send abandoned, receives the compute stream waits
// for): abort, so that NCCL's kernels end instead of waiting for peers that will never match, and
// freeing the step's buffers (which waits for the device) does not hang until the watchdog fires.
void NcclComm::abandon_in_flight() noexcept {
  reap();
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    if (pending_.empty()) return;
  }
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  abort_all("an error on this rank left collectives in flight");
}

// Issues NCCL calls on the communicator of `key`, then waits until NCCL has put them on the
// stream: a non-blocking communicator may return ncclInProgress and go on issuing in the
// background, and an event recorded before that is done would not follow the collective.
void NcclComm::issue(const CommKey& key, const std::function<void(ncclComm_t)>& fn) {
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  throw_if_aborted();
  ncclComm_t comm = comms_.at(key).handle;
  fn(comm);
  settle(comm, "issuing the collective");
}

// Polls `comm` until its background work is done, bounded by the timeout (then every
// communicator is aborted). Needs nccl_mutex_.
void NcclComm::settle(ncclComm_t comm, const char* what) {
  const auto deadline = Clock::now() + timeout_;
  for (Backoff backoff;; backoff.pause()) {
    ncclResult_t state = ncclSuccess;
    PTRAIN_DIST_CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw DistError("NCCL error '" + nccl_error(state) + "' " + what);
    if (Clock::now() > deadline) {
      abort_all("NCCL still " + std::string(what) + " after " + seconds(timeout_));
      throw DistError(abort_reason_);
    }
  }
}

// Waits for `event` on the host, bounded by the timeout, watching key's communicator for errors.
void NcclComm::wait(const CommKey& key, cudaEvent_t event) {
  const auto deadline = Clock::now() + timeout_;
  for (Backoff backoff;; backoff.pause()) {
    const cudaError_t query = cudaEventQuery(event);
    if (query == cudaSuccess) return;
    if (query != cudaErrorNotReady) PTRAIN_DIST_CHECK(query);
    static_cast<void>(cudaGetLastError());  // "not ready" is no error: keep it from later launch checks
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    throw_if_aborted();
    ncclResult_t state = ncclSuccess;
    const Communicator& c = comms_.at(key);
    PTRAIN_DIST_CHECK(ncclCommGetAsyncError(c.handle, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      abort_all("NCCL error '" + nccl_error(state) + "' on group " + c.group);
      throw DistError(abort_reason_);
    }
    if (Clock::now() > deadline) {
      abort_all("not finished after " + seconds(timeout_) + " (every NCCL communicator of this rank is aborted)");
      throw DistError(abort_reason_);
    }
  }
}

// Retires the collectives the device has finished (in any order: sends in flight on a channel's
// stream may finish after later work on the comm stream), marking them done in the log. Returns a
// failure message if one failed, or if the oldest unfinished one is older than the timeout, else "".
std::string NcclComm::reap() {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  std::string late;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const cudaError_t query = cudaEventQuery(it->done);
    if (query == cudaErrorNotReady) {
      static_cast<void>(cudaGetLastError());  // no error: keep it from later launch checks
      if (late.empty() && Clock::now() - it->start > timeout_)
        late = "rank " + std::to_string(rank()) + ": " + it->op.name + " did not finish within " +
               seconds(timeout_);
      ++it;
      continue;
    }
    if (query != cudaSuccess)
      return "rank " + std::to_string(rank()) + ": " + it->op.name +
             " failed on the device: " + cudaGetErrorString(query);
    finished(it->op.seq);
    free_events_.push_back(it->done);
    it = pending_.erase(it);
  }
  return late;
}

// NCCL's asynchronous errors (a peer vanished, a network failure), or "".
std::string NcclComm::async_error() {
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  if (aborted_) return {};
  for (const auto& [id, c] : comms_) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(c.handle, &state);
    if (status != ncclSuccess) state = status;
    if (state == ncclSuccess || state == ncclInProgress) continue;
    std::string what =
        "rank " + std::to_string(rank()) + ": NCCL error '" + nccl_error(state) + "' on group " + c.group;
    std::lock_guard<std::mutex> pending_lock(pending_mutex_);
    if (!pending_.empty()) what += " while " + pending_.front().op.name + " was running";
    return what;
  }
  return {};
}

void NcclComm::watch() {
  cudaSetDevice(device_);  // events and communicators belong to this rank's device
  std::unique_lock<std::mutex> lock(stop_mutex_);
  while (!stop_cv_.wait_for(lock, kWatchPeriod, [this] { return stopping_; })) {
    lock.unlock();
    std::string failure = reap();
    if (failure.empty()) failure = async_error();
    if (!failure.empty()) return fail(failure);
    lock.lock();
  }
}

// The watchdog's end: abort, so nothing waits on the dead collective, then let the caller report.
void NcclComm::fail(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    if (aborted_) return;  // a synchronous wait got there first and throws to its caller
    abort_all(what);
  }
  if (on_failure_) on_failure_(what, log().dump());
}

// Needs nccl_mutex_. Children before the world, which they were split from.
void NcclComm::abort_all(const std::string& reason) {
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) ncclCommAbort(it->second.handle);
  comms_.clear();
}

void NcclComm::throw_if_aborted() const {
  if (aborted_) throw DistError("the NCCL communicators were aborted: " + abort_reason_);
}

}  // namespace ptrain::dist
