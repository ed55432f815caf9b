// NcclComm's ordering on the device (nccl_comm_impl.h): a collective on device memory waits for the
// compute stream and the compute stream for it, through events from a pool, and each wait of the
// compute stream is timed (Comm::settle_device_waits).
#include "engine/comm/nccl_comm_impl.h"

#include "engine/comm/nccl_calls.h"

namespace ptrain::dist {

using namespace nccl;  // nccl_calls.h

// The compute stream waits for the collective's done event, if the device has not finished it
// (finished ones have left pending_; a wait captures the event's state now, so its later reuse
// cannot matter).
void NcclComm::join(Ticket ticket) {
  if (ticket == 0) return;
  std::lock_guard<std::mutex> lock(pending_mutex_);
  for (const Pending& p : pending_) {
    if (p.op.seq != ticket) continue;
    compute_waits_for(p.done, p.group);
    return;
  }
}

std::uint64_t NcclComm::device_wait_mark() const {
  std::lock_guard<std::mutex> lock(waits_mutex_);
  return next_wait_;
}

// Never waits: the compute stream runs its waits in order, so the settled ones are those up to
// the first whose closing event the device has not reached (none, if the caller kept its promise;
// the rest stay for a later call).
std::optional<std::vector<Comm::DeviceWait>> NcclComm::settle_device_waits(std::uint64_t mark) {
  std::vector<Wait> done;
  {
    std::lock_guard<std::mutex> lock(waits_mutex_);
    settled_ = true;
    while (!waits_.empty() && waits_.front().seq < mark) {
      const cudaError_t reached = cudaEventQuery(waits_.front().after);
      if (reached == cudaErrorNotReady) {
        static_cast<void>(cudaGetLastError());  // no error: keep it from later launch checks
        break;
      }
      PTRAIN_DIST_CHECK(reached);
      done.push_back(waits_.front());
      waits_.pop_front();
    }
  }
  std::vector<DeviceWait> out;
  for (const Wait& w : done) {
    float ms = 0;
    PTRAIN_DIST_CHECK(cudaEventElapsedTime(&ms, w.before, w.after));
    out.push_back({w.seq, w.group, static_cast<double>(ms) / 1e3});
  }
  std::lock_guard<std::mutex> lock(waits_mutex_);
  for (const Wait& w : done) free_timing_events_.push_back(w.before), free_timing_events_.push_back(w.after);
  return out;
}

// On `stream` (the comm stream, or a channel's for its sends), ordered after the work already on
// the compute stream and, unless `overlap` (then the caller joins the ticket returned), before
// the work enqueued after it, with events only: the host goes on at once and the watchdog
// follows the collective.
Comm::Ticket NcclComm::run_on_device(const CommKey& key, void* data, const Enqueue& enqueue, bool overlap,
                                     cudaStream_t stream) {
  PTRAIN_DIST_CHECK(cudaEventRecord(ready_, compute_));
  PTRAIN_DIST_CHECK(cudaStreamWaitEvent(stream, ready_, 0));
  const std::uint64_t traced = trace_mark(stream);
  issue(key, [&](ncclComm_t comm) { enqueue(data, comm, stream); });
  trace_device(traced, trace_mark(stream), stream_track(stream));
  cudaEvent_t done = take_event();
  PTRAIN_DIST_CHECK(cudaEventRecord(done, stream));
  if (!overlap) compute_waits_for(done, key.group);
  const Deferred op = defer_completion();
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.push_back({op, done, Clock::now(), key.group});
  return op.seq;
}

// The trace track of `stream`: the comm stream's, or the track of its own that each send stream
// has (sends on two channels overlap).
int NcclComm::stream_track(cudaStream_t stream) const {
  if (stream == comm_stream_) return Trace::kCommStream;
  int n = 0;
  for (const auto& entry : send_streams_) {
    if (entry.second == stream) break;
    ++n;
  }
  return Trace::send_stream_track(n);
}

// The compute stream waits for `done`, work of group `group`, between two timing events that
// measure how long it stood still (see Comm::settle_device_waits).
void NcclComm::compute_waits_for(cudaEvent_t done, int group) {
  std::lock_guard<std::mutex> lock(waits_mutex_);
  cudaEvent_t around[2];
  for (cudaEvent_t& e : around) {
    if (free_timing_events_.empty()) {
      PTRAIN_DIST_CHECK(cudaEventCreate(&e));
    } else {
      e = free_timing_events_.back();
      free_timing_events_.pop_back();
    }
  }
  PTRAIN_DIST_CHECK(cudaEventRecord(around[0], compute_));
  PTRAIN_DIST_CHECK(cudaStreamWaitEvent(compute_, done, 0));
  PTRAIN_DIST_CHECK(cudaEventRecord(around[1], compute_));
  waits_.push_back({next_wait_++, group, around[0], around[1]});
  // Where nobody settles (a collective sweep of `ptrain profile --nproc`), the oldest go back to
  // the pool: an event may be recorded again before the device reached its last record. Once
  // somebody settles (the trainer, every step), nothing is dropped.
  if (!settled_ && waits_.size() > kUnsettledWaits) {
    free_timing_events_.push_back(waits_.front().before);
    free_timing_events_.push_back(waits_.front().after);
    waits_.pop_front();
  }
}

cudaEvent_t NcclComm::take_event() {
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  PTRAIN_DIST_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace ptrain::dist
