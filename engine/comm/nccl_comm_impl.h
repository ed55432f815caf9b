// NcclComm: the NCCL backend behind make_nccl_comm (nccl_comm.h says what it does). One class,
// its methods in files by job:
//   nccl_comm.cpp         its life: streams, the world communicator, group splits, the healthy close
//   nccl_collectives.cpp  the collectives, on device memory or staged through the device
//   nccl_channels.cpp     point to point: the channels' communicators and streams, sends, receives
//   nccl_device_order.cpp how the compute stream and the comm streams wait for each other (events)
//   nccl_staging.cpp      host memory through the device scratch and its pinned mirror
//   nccl_watchdog.cpp     issuing and waiting against the timeout, the watchdog thread and abort
// Internal to the NCCL objects (engine/comm/CMakeLists.txt): it includes CUDA's and NCCL's headers.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <compare>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/nccl_comm.h"

namespace ptrain::dist {

class NcclComm final : public Comm {
 public:
  using Clock = std::chrono::steady_clock;

  NcclComm(int rank, int world, const NcclOptions& options)
      : Comm(rank, world),
        timeout_(options.timeout),
        compute_(static_cast<cudaStream_t>(options.compute_stream)),
        on_failure_(options.on_failure) {}
  ~NcclComm() override;

  const char* backend() const override { return "nccl"; }
  bool takes_device_memory() const override { return true; }
  // On an opened channel (open_channels), from device memory; see nccl_comm.h.
  bool sends_in_flight() const override { return true; }
  void join(Ticket ticket) override;
  std::uint64_t device_wait_mark() const override;
  std::optional<std::vector<DeviceWait>> settle_device_waits(std::uint64_t mark) override;
  // Creates the streams and the world communicator, then starts the watchdog.
  void start(StoreClient& store);

 protected:
  void connect(const Group& g) override;
  void do_open_channel(const Group& g, const Channel& c, std::size_t message_bytes) override;
  void abandon_in_flight() noexcept override;
  void do_all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op,
                     bool overlap) override;
  void do_reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type, bool overlap) override;
  void do_all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, bool overlap) override;
  void do_all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                      const std::vector<std::size_t>& recv_counts) override;
  void do_broadcast(const Group& g, void* data, std::size_t bytes, int root) override;
  void do_send(const Group& g, const void* data, std::size_t bytes, int peer, int channel) override;
  void do_recv(const Group& g, void* data, std::size_t bytes, int peer, int channel) override;
  std::function<void()> do_isend(const Group& g, const void* data, std::size_t bytes, int peer,
                                 int channel) override;
  void do_barrier(const Group& g) override;

 private:
  // A communicator's key: a group's (its id alone), or one opened channel of a group's.
  struct CommKey {
    int group = 0;
    int from = -1, to = -1, channel = -1;
    auto operator<=>(const CommKey&) const = default;
  };
  static CommKey key_of(const Group& g) { return {g.id}; }
  struct Communicator {
    ncclComm_t handle = nullptr;
    std::string group;  // its name in messages: the group's, and the channel's
  };
  // Where a message from member `from` to member `to` of g goes: the channel's communicator when
  // opened (the sender is its rank 0), else, for channel 0 only, the group's.
  struct Route {
    CommKey key;
    int peer;  // the other end's rank in that communicator
  };
  // A collective enqueued on device memory that the device has not finished yet.
  struct Pending {
    Deferred op;
    cudaEvent_t done;
    Clock::time_point start;
    int group;  // Group::id
  };
  // One wait of the compute stream on a collective or message (see Comm::settle_device_waits).
  struct Wait {
    std::uint64_t seq;
    int group;  // Group::id
    cudaEvent_t before, after;  // timing events on the compute stream around the wait
  };
  // What host staging copies: `in_bytes` from `in` to the start of the scratch before the
  // collective, `out_bytes` from scratch offset `out_offset` back to the output after it.
  struct Staging {
    const void* in;
    std::size_t in_bytes;
    std::size_t out_offset;
    std::size_t out_bytes;
  };
  // Issues a collective: `enqueue(buffer, comm, stream)` puts it on `stream`.
  using Enqueue = std::function<void(void* buffer, ncclComm_t comm, cudaStream_t stream)>;

  // nccl_collectives.cpp
  void run(const CommKey& key, const void* data, Staging staging, const Enqueue& enqueue, void* out = nullptr,
           bool overlap = false);
  // nccl_channels.cpp
  Route route_of(const Group& g, int from, int to, int channel);
  void warm_up(const CommKey& key, bool sender, std::size_t bytes);
  // nccl_device_order.cpp
  Ticket run_on_device(const CommKey& key, void* data, const Enqueue& enqueue, bool overlap, cudaStream_t stream);
  int stream_track(cudaStream_t stream) const;
  void compute_waits_for(cudaEvent_t done, int group);
  cudaEvent_t take_event();
  // nccl_staging.cpp
  void run_staged(const CommKey& key, Staging staging, void* out, const Enqueue& enqueue);
  char* reserve(std::size_t bytes);
  bool is_device(const void* ptr) const;
  // nccl_watchdog.cpp
  void issue(const CommKey& key, const std::function<void(ncclComm_t)>& fn);
  void settle(ncclComm_t comm, const char* what);
  void wait(const CommKey& key, cudaEvent_t event);
  std::string reap();
  std::string async_error();
  void watch();
  void fail(const std::string& what);
  void abort_all(const std::string& reason);
  void throw_if_aborted() const;
  // nccl_comm.cpp
  void close_communicators();


  std::chrono::milliseconds timeout_;
  cudaStream_t compute_;
  NcclFailureFn on_failure_;
  int device_ = -1;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;   // compute -> comm ordering; reusable at once after the wait is enqueued
  cudaEvent_t staged_ = nullptr;  // the end of a synchronous collective

  // nccl_mutex_ guards the communicators: the trainer thread issues and polls, the watchdog polls
  // and may abort them, after which nobody may touch them.
  std::mutex nccl_mutex_;
  std::map<CommKey, Communicator>
      comms_;  // groups' by id, in creation order (the world first), then channels'
  std::map<CommKey, cudaStream_t> send_streams_;  // the channels this rank sends on
  StoreClient* store_ = nullptr;                  // for the channels' unique ids
  ncclComm_t split_result_ = nullptr;
  bool aborted_ = false;
  std::string abort_reason_;

  std::mutex pending_mutex_;
  std::deque<Pending> pending_;  // oldest first
  std::vector<cudaEvent_t> free_events_;

  static constexpr std::size_t kUnsettledWaits = 1 << 16;  // kept while nobody settles
  mutable std::mutex waits_mutex_;  // taken after pending_mutex_ where both are
  std::deque<Wait> waits_;          // recorded, not yet settled; oldest first
  std::uint64_t next_wait_ = 0;
  bool settled_ = false;  // settle_device_waits has been called: the cap no longer applies
  std::vector<cudaEvent_t> free_timing_events_;

  char* scratch_ = nullptr;  // device
  char* pinned_ = nullptr;   // host
  std::size_t staging_bytes_ = 0;

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace ptrain::dist
