// Comm: every collective of the engine goes through this interface (one path, whichever the
// layout, so any layout can be proven against one rank). The backends (Gloo on CPU; NCCL with the
// CUDA backend) implement the transport; this base class owns what they share: the groups, the
// argument checks, trivial one-rank groups, and a ring log of each rank's recent collectives, which
// is what a timeout reports so that a mismatch (one rank in an all-reduce, another in a barrier, or
// a rank missing) names the rank and the op.
//
// Groups are built from the grid: new_group is collective over the whole world, every rank calls
// it for every group in the same order (members and non-members alike), like Megatron's
// parallel_state. Ranks inside a group are addressed by their index in the group's rank list.
//
// reduce_scatter and all_gather work in place on a buffer of group.size() equal chunks (NCCL's
// in-place convention): after reduce_scatter, chunk `index` holds the sum of every rank's chunk
// `index`; all_gather fills every chunk from the rank that owns it. ZeRO's flat buffers are laid
// out for exactly this.
//
// Memory: data pointers in host memory are always accepted. When takes_device_memory() is true
// (NCCL), they may also point to CUDA device memory, and then the collective runs on the device,
// ordered after the work already enqueued on the compute stream and before the work enqueued after
// it, without waiting on the host; host data is staged through the device and waited for, since
// the caller reads it when the call returns. Callers that can skip their own host staging ask.
//
// Overlap: all_reduce, reduce_scatter and all_gather on device memory may instead leave the work
// enqueued after them free to run alongside (ZeRO's gradient reductions overlap the rest of the
// backward this way): given a Ticket*, they do not order the compute stream after themselves but
// return a ticket, and the caller calls join(ticket) before the compute stream reads or writes the
// data again. Collectives that complete on return (host memory, Gloo) give ticket 0, which joins
// nothing.
//
// BF16 is bfloat16 stored as std::uint16_t: reductions add in fp32 and round to nearest even once
// per step of the algorithm (as NCCL does), so results with more than two ranks may depend on the
// algorithm's order, like any low-precision reduction.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/trace.h"
#include "engine/launch/dist_error.h"

namespace ptrain::dist {

enum class ReduceOp { Sum, Max, Min };
enum class ElemType { F32, F64, I64, BF16 };
std::size_t elem_size(ElemType type);

struct Group {
  int id = -1;               // creation order, the same on every rank
  std::string name;          // e.g. "dp-cp[0,2]"
  std::vector<int> ranks;    // world ranks, in group order
  int index = -1;            // this rank's position in `ranks`, -1 if not a member
  int size() const { return static_cast<int>(ranks.size()); }
  bool has_me() const { return index >= 0; }
};

// Where a rank is among its collectives: its latest call. `group_call` counts the calls on the group
// (1 for the first), the same on every member for a collective (members call them in the same order),
// so that ranks can be compared: a member whose latest call on the group is an earlier one never
// entered this one. Its heartbeat carries it (comm/heartbeat.h).
struct CollectivePosition {
  std::uint64_t seq = 0;  // this rank's sequence number (the log's #)
  std::string op;
  int group_id = -1;
  std::string group;
  std::uint64_t group_call = 0;
  int peer = -1;  // point to point: the other end's index in the group
  bool in_flight = false;
};

// The last collectives of one rank: sequence number, op, group, bytes, peer, how long.
class CollectiveLog {
 public:
  static constexpr std::size_t kCapacity = 64;
  std::uint64_t begin(const char* op, const Group& group, std::size_t bytes, int peer);
  void end(std::uint64_t seq);
  // Oldest first, one line each, the one in flight (if any) marked.
  std::string dump() const;
  // Whether a call has begun and not ended.
  bool in_flight() const;
  // The latest call (in flight or not); nullopt before the first.
  std::optional<CollectivePosition> latest() const;

 private:
  struct Entry {
    std::uint64_t seq = 0;
    const char* op = "";
    int group_id = -1;
    std::uint64_t group_call = 0;
    std::string group;
    std::size_t bytes = 0;
    int peer = -1;
    std::chrono::steady_clock::time_point start;
    double seconds = -1;  // -1 while in flight
  };
  mutable std::mutex mutex_;  // the watchdog thread reads while the trainer writes
  std::deque<Entry> entries_;
  std::uint64_t next_seq_ = 1;
  std::map<int, std::uint64_t> group_calls_;  // by group id
};

// A collective failed or timed out; what() names it, log_dump() is this rank's ring log.
class CollectiveError : public DistError {
 public:
  CollectiveError(const std::string& what, std::string log_dump)
      : DistError(what), log_dump_(std::move(log_dump)) {}
  const std::string& log_dump() const { return log_dump_; }

 private:
  std::string log_dump_;
};

class Comm {
 public:
  Comm(int rank, int world);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  virtual const char* backend() const = 0;

  const Group& world_group() const { return *groups_.front(); }
  // Collective over the world (see the file comment). `ranks` must be distinct world ranks.
  const Group& new_group(const std::string& name, const std::vector<int>& ranks);

  // True when collectives accept CUDA device pointers too (see the file comment).
  virtual bool takes_device_memory() const { return false; }

  // A device collective left running alongside the compute stream (see Overlap above); 0 is none.
  using Ticket = std::uint64_t;

  void all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op = ReduceOp::Sum,
                  Ticket* overlap = nullptr);
  void all_reduce(const Group& g, float* data, std::size_t count, ReduceOp op = ReduceOp::Sum) {
    all_reduce(g, data, count, ElemType::F32, op);
  }
  void all_reduce(const Group& g, double* data, std::size_t count, ReduceOp op = ReduceOp::Sum) {
    all_reduce(g, data, count, ElemType::F64, op);
  }
  void all_reduce(const Group& g, std::int64_t* data, std::size_t count, ReduceOp op = ReduceOp::Sum) {
    all_reduce(g, data, count, ElemType::I64, op);
  }
  // In place, see above; `chunk` counts elements. reduce_scatter sums, of any type.
  void reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type,
                      Ticket* overlap = nullptr);
  void all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, Ticket* overlap = nullptr);
  // Orders the compute stream's later work after the collective `ticket` names (nothing for 0, or
  // for one the device has finished).
  virtual void join(Ticket ticket) { static_cast<void>(ticket); }

  // Where the compute stream, not the host, waits for collectives and messages (NCCL): how long it
  // stood still in each wait, measured by a timing event on each side of the wait (0 when the work
  // was done before the compute stream got there). device_wait_mark() counts the waits recorded so
  // far; settle_device_waits(mark) returns every wait recorded before `mark` that it has not
  // returned before, oldest first, and forgets them. It never waits for the device: call it after
  // the host has waited for later work on the compute stream (waits the device has not finished
  // stay for a later call). nullopt where waits happen on the host (Gloo): Traffic::seconds tells
  // those. Until the first settle, a backend may forget the oldest waits past a limit.
  struct DeviceWait {
    std::uint64_t seq = 0;  // its place among this Comm's waits (device_wait_mark counts them)
    int group = -1;         // Group::id of the work waited for
    double seconds = 0;
  };
  virtual std::uint64_t device_wait_mark() const { return 0; }
  virtual std::optional<std::vector<DeviceWait>> settle_device_waits(std::uint64_t mark) {
    static_cast<void>(mark);
    return std::nullopt;
  }
  void reduce_scatter(const Group& g, float* data, std::size_t chunk) { reduce_scatter(g, data, chunk, ElemType::F32); }
  void all_gather(const Group& g, float* data, std::size_t chunk) { all_gather(g, data, chunk, ElemType::F32); }
  // out[j*chunk ...] receives rank j's in[index*chunk ...].
  void all_to_all(const Group& g, const float* in, float* out, std::size_t chunk);
  // Rank i sends send_counts[j] elements (consecutive in `in`) to rank j and receives
  // recv_counts[j] from it (consecutive in `out`).
  void all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                   const std::vector<std::size_t>& recv_counts);
  void broadcast(const Group& g, void* data, std::size_t bytes, int root);
  // What this rank has run on group g since the Comm began, by op name ("all_reduce", "all_gather",
  // "reduce_scatter", "send", "isend", "recv", ...): calls and bytes (a collective's whole buffer,
  // every rank's chunks for all_gather and reduce_scatter; a message's bytes) and wall seconds. The
  // trainer turns it into the bytes each axis sent, which validate predicts, and the time it took.
  struct Traffic {
    std::uint64_t calls = 0;
    double bytes = 0;
    double seconds = 0;  // inside the calls (an overlapped one: while it was issued)
  };
  const std::map<std::string, Traffic>& traffic(const Group& g) const;

  // Point to point. Messages from one rank to another on one `channel` are matched in order (the
  // n-th send meets the n-th recv); channels are independent of each other (the pipeline keeps
  // activations and gradients apart this way). send returns once `data` may be changed again.
  void send(const Group& g, const void* data, std::size_t bytes, int peer, int channel = 0);
  void recv(const Group& g, void* data, std::size_t bytes, int peer, int channel = 0);
  // A send left in flight: `data` must stay unchanged until wait() returns, which throws a
  // CollectiveError naming the send if it failed. Destroying (or assigning over) a handle that was
  // not waited for waits, errors unreported: call wait(). Except while an exception unwinds the
  // stack: then the send is abandoned (a send to a hung peer would wait out its timeout), and the
  // point-to-point order with that peer is broken, so the Comm must not be used for it again.
  class SendHandle {
   public:
    SendHandle() = default;
    SendHandle(SendHandle&& other) noexcept;
    SendHandle& operator=(SendHandle&& other) noexcept;
    ~SendHandle();
    void wait();

   private:
    friend class Comm;
    Comm* comm_ = nullptr;
    std::uint64_t seq_ = 0;
    std::string name_;
    std::function<void()> wait_;  // empty: nothing in flight
  };
  // Starts a send and returns without waiting for the receiver where sends_in_flight(); other
  // backends send at once.
  SendHandle isend(const Group& g, const void* data, std::size_t bytes, int peer, int channel = 0);
  // True when isend returns before the receiver has received (what pipeline schedules need: two
  // ranks may send to each other before either receives).
  virtual bool sends_in_flight() const { return false; }
  // One point-to-point channel of a group: messages from member `from` to member `to` (group
  // indices) on `channel`.
  struct Channel {
    int from = 0;
    int to = 0;
    int channel = 0;
  };
  // Sets up the channels that sends and receives on g will use, where the backend needs it (NCCL
  // gives each its own communicator of two ranks, so that no channel or direction waits behind
  // another, and sends one message of `message_bytes`, the largest the channels carry, through it;
  // see nccl_comm.h). Every member of g calls it with the same list; each rank takes part in the
  // channels it is an end of, in list order, so two ranks never wait for each other in turn.
  void open_channels(const Group& g, const std::vector<Channel>& channels, std::size_t message_bytes);
  // Called when an error unwinds past work this rank left in flight (a send never waited for, a
  // step's collectives on the device): a backend whose collectives outlive the call (NCCL) aborts
  // them, so that nothing waits for peers that will never match. Every later collective fails.
  virtual void abandon_in_flight() noexcept {}
  void barrier(const Group& g);

  // Small control messages (checkpoint paths, manifests): `text` of the root replaces everyone's;
  // gather_strings returns every member's string at the root (empty elsewhere).
  void broadcast_string(const Group& g, std::string& text, int root);
  std::vector<std::string> gather_strings(const Group& g, const std::string& mine, int root);

  const CollectiveLog& log() const { return log_; }
  // The group with this id (Group::id), for reading another rank's position.
  const Group& group(int id) const { return *groups_.at(static_cast<std::size_t>(id)); }
  // Called when a call fails (it timed out, or a peer that gave up closed its connections), before
  // its CollectiveError is made: the text it returns (the session's verdict on which rank hung,
  // comm/heartbeat.h) leads the error. Its first line comes first, the call's own failure after it;
  // its other lines follow.
  void set_failure_verdict(std::function<std::string()> verdict) { failure_verdict_ = std::move(verdict); }
  // Records every call from now on as a span of `trace`'s collectives track (op, group, bytes,
  // peer); nullptr stops. The trace must outlive the calls.
  void set_trace(Trace* trace) { trace_ = trace; }

 protected:
  // Backend hooks, arguments checked. connect runs on every rank for every group of two or more
  // ranks, members and non-members alike (NCCL splits communicators collectively over the world;
  // g.has_me() tells); the collectives run only on members of groups of two or more.
  virtual void connect(const Group& g) = 0;
  // `overlap`: a device collective must not order the compute stream after itself (see Overlap).
  virtual void do_all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op,
                             bool overlap) = 0;
  virtual void do_reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type,
                                 bool overlap) = 0;
  virtual void do_all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, bool overlap) = 0;
  virtual void do_all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts,
                              float* out, const std::vector<std::size_t>& recv_counts) = 0;
  virtual void do_broadcast(const Group& g, void* data, std::size_t bytes, int root) = 0;
  virtual void do_send(const Group& g, const void* data, std::size_t bytes, int peer, int channel) = 0;
  virtual void do_recv(const Group& g, void* data, std::size_t bytes, int peer, int channel) = 0;
  // Starts a send and returns what waits for it; the default sends at once and returns nothing.
  virtual std::function<void()> do_isend(const Group& g, const void* data, std::size_t bytes, int peer,
                                         int channel);
  virtual void do_barrier(const Group& g) = 0;
  // Sets up one channel this rank is an end of; the default has nothing to set up.
  virtual void do_open_channel(const Group& g, const Channel& c, std::size_t message_bytes) {
    static_cast<void>(g), static_cast<void>(c), static_cast<void>(message_bytes);
  }

  // For a backend whose collectives complete after the hook returns (NCCL enqueues them on a
  // stream). Called inside a hook, it keeps the running collective in flight in the log and returns
  // its sequence number and name ("all_reduce #12 on group dp[0,1] (4096 bytes)"); the backend calls
  // finished(seq), from any thread, once it is over.
  struct Deferred {
    std::uint64_t seq;
    std::string name;
  };
  Deferred defer_completion();
  void finished(std::uint64_t seq) { log_.end(seq); }
  // For such a backend, inside a hook, where the trace follows the device (Trace::attach_device):
  // trace_mark(stream) is a marker on `stream` (a cudaStream_t; 0 when not traced), and
  // trace_device(from, to, track) shows the running collective between two markers on `track`,
  // named as on the collectives track.
  std::uint64_t trace_mark(const void* stream) const;
  void trace_device(std::uint64_t from, std::uint64_t to, int track);

 private:
  struct Running {
    std::uint64_t seq = 0;
    const char* op = "";
    const Group* group = nullptr;
    std::size_t bytes = 0;
    int peer = -1;
    bool deferred = false;
  };
  std::string name(const Running& r) const;
  // The running collective's trace args ("\"group\": ..., \"bytes\": ...").
  std::string trace_args(const Group& g, std::size_t bytes, int peer) const;
  void check_member(const Group& g, const char* op) const;
  void check_peer(const Group& g, const char* op, int peer, int channel) const;
  // Runs one collective under the log: a backend exception becomes a CollectiveError naming it.
  template <typename Fn>
  void logged(const char* op, const Group& g, std::size_t bytes, int peer, Fn&& fn);
  // After logged(): the ticket of the collective that just ran, if it is still running (deferred).
  void hand_out_ticket(Ticket* overlap) const;

  int rank_, world_;
  std::vector<std::unique_ptr<Group>> groups_;
  CollectiveLog log_;
  std::map<int, std::map<std::string, Traffic>> traffic_;  // by group id, then op
  Running running_;  // the collective in logged(), for defer_completion and error messages
  Trace* trace_ = nullptr;
  std::function<std::string()> failure_verdict_;
};

// The world of one process (no transport): every group has one rank.
std::unique_ptr<Comm> make_solo_comm();

}  // namespace ptrain::dist
