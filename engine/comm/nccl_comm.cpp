#include "engine/comm/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <compare>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ptrain::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kWatchPeriod = std::chrono::milliseconds(100);
constexpr std::size_t kMinStagingBytes = std::size_t{1} << 16;
constexpr const char* kUniqueIdKey = "nccl/world/unique_id";  // the store serves one job

// Checked calls, formatted as kernels/cuda/check.cuh's PTRAIN_CUDA_CHECK (statement, device,
// file:line) but thrown as DistError, which the Comm base class turns into a CollectiveError
// naming the collective. ncclInProgress is not a failure: a non-blocking communicator carries on
// in the background, and settle() waits for it.
[[noreturn]] void throw_failure(const char* library, const std::string& error, const char* stmt, const char* file,
                                int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  throw DistError(std::string(library) + " error '" + error + "' in `" + stmt + "` on device " +
                  std::to_string(device) + " at " + file + ":" + std::to_string(line));
}

std::string nccl_error(ncclResult_t status) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string(": ") + last;
  return text;
}

void check_status(cudaError_t status, const char* stmt, const char* file, int line) {
  if (status != cudaSuccess) throw_failure("CUDA", cudaGetErrorString(status), stmt, file, line);
}

void check_status(ncclResult_t status, const char* stmt, const char* file, int line) {
  if (status != ncclSuccess && status != ncclInProgress) throw_failure("NCCL", nccl_error(status), stmt, file, line);
}

#define PTRAIN_DIST_CHECK(stmt) check_status((stmt), #stmt, __FILE__, __LINE__)

ncclDataType_t nccl_type(ElemType type) {
  switch (type) {
    case ElemType::F32: return ncclFloat32;
    case ElemType::F64: return ncclFloat64;
    case ElemType::I64: return ncclInt64;
    case ElemType::BF16: return ncclBfloat16;
  }
  throw DistError("NCCL: unknown element type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  throw DistError("NCCL: unknown reduce op");
}

// Non-blocking, so that creating, splitting and finalizing can be polled against the timeout.
ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Pauses between polls: short at first (issuing a collective takes NCCL's background thread
// microseconds), then longer, up to a millisecond (creating a communicator takes seconds).
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(2 * delay_, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::microseconds delay_{1};
};

std::string seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

class NcclComm final : public Comm {
 public:
  NcclComm(int rank, int world, const NcclOptions& options)
      : Comm(rank, world),
        timeout_(options.timeout),
        compute_(static_cast<cudaStream_t>(options.compute_stream)),
        on_failure_(options.on_failure) {}

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(stop_mutex_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    close_communicators();
    // Stream-ordered and deferred by CUDA until the work already enqueued is done.
    if (scratch_ != nullptr) cudaFreeAsync(scratch_, comm_stream_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    for (const Pending& p : pending_) cudaEventDestroy(p.done);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (const Wait& w : waits_) cudaEventDestroy(w.before), cudaEventDestroy(w.after);
    for (cudaEvent_t e : free_timing_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : {ready_, staged_})
      if (e != nullptr) cudaEventDestroy(e);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
    for (const auto& [key, stream] : send_streams_) cudaStreamDestroy(stream);
  }

  const char* backend() const override { return "nccl"; }
  bool takes_device_memory() const override { return true; }
  // On an opened channel (open_channels), from device memory; see nccl_comm.h.
  bool sends_in_flight() const override { return true; }

  // The compute stream waits for the collective's done event, if the device has not finished it
  // (finished ones have left pending_; a wait captures the event's state now, so its later reuse
  // cannot matter).
  void join(Ticket ticket) override {
    if (ticket == 0) return;
    std::lock_guard<std::mutex> lock(pending_mutex_);
    for (const Pending& p : pending_) {
      if (p.op.seq != ticket) continue;
      compute_waits_for(p.done, p.group);
      return;
    }
  }

  std::uint64_t device_wait_mark() const override {
    std::lock_guard<std::mutex> lock(waits_mutex_);
    return next_wait_;
  }

  // Never waits: the compute stream runs its waits in order, so the settled ones are those up to
  // the first whose closing event the device has not reached (none, if the caller kept its promise;
  // the rest stay for a later call).
  std::optional<std::vector<DeviceWait>> settle_device_waits(std::uint64_t mark) override {
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

  // Creates the streams and the world communicator (rank 0's unique id goes through the store),
  // then starts the watchdog. Separate from the constructor so that the destructor cleans up
  // whatever a failure here leaves.
  void start(StoreClient& store) {
    store_ = &store;
    PTRAIN_DIST_CHECK(cudaGetDevice(&device_));
    PTRAIN_DIST_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    PTRAIN_DIST_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    PTRAIN_DIST_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
    if (world() > 1) {
      ncclUniqueId id;
      if (rank() == 0) {
        PTRAIN_DIST_CHECK(ncclGetUniqueId(&id));
        store.set(kUniqueIdKey, std::vector<char>(id.internal, id.internal + sizeof id.internal));
      } else {
        read_unique_id(store.get(kUniqueIdKey, timeout_), id);
      }
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      ncclConfig_t config = nonblocking_config();
      ncclComm_t comm = nullptr;
      PTRAIN_DIST_CHECK(ncclCommInitRankConfig(&comm, world(), id, rank(), &config));
      comms_[key_of(world_group())] = {comm, world_group().name};
      settle(comm, "creating the world communicator");
    }
    watchdog_ = std::thread([this] { watch(); });
  }

 protected:
  // A split is collective over the world communicator: non-members take part with no colour.
  void connect(const Group& g) override {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    throw_if_aborted();
    ncclComm_t world_comm = comms_.at(key_of(world_group())).handle;
    ncclConfig_t config = nonblocking_config();
    // NCCL writes the new communicator when the split completes in the background, so the slot is
    // a member: a split abandoned on timeout cannot write into a dead stack frame.
    split_result_ = nullptr;
    PTRAIN_DIST_CHECK(
        ncclCommSplit(world_comm, g.has_me() ? 0 : NCCL_SPLIT_NOCOLOR, std::max(g.index, 0), &split_result_, &config));
    settle(world_comm, "splitting the world communicator");
    if (!g.has_me()) return;
    if (split_result_ == nullptr) throw DistError("ncclCommSplit gave no communicator to a member of the group");
    comms_[key_of(g)] = {split_result_, g.name};
    settle(split_result_, "creating the group's communicator");
  }

  // A communicator of two ranks (the sender is its rank 0), from a unique id the sender publishes
  // through the store, warmed up with one message; the sender also gets a stream for its sends.
  void do_open_channel(const Group& g, const Channel& c, std::size_t message_bytes) override {
    const CommKey key{g.id, c.from, c.to, c.channel};
    const std::string name = g.name + " channel " + std::to_string(c.channel) + " " + std::to_string(c.from) +
                             "->" + std::to_string(c.to);
    if (const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        queues != nullptr && std::string(queues) == "1")
      throw DistError(
          "CUDA_DEVICE_MAX_CONNECTIONS=1 puts every stream on one hardware queue, where a pipeline send "
          "can wait behind a receive that waits for the peer's send: unset it to run pipeline stages");
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      throw_if_aborted();
      if (comms_.count(key) != 0) throw DistError(name + " is already open");
    }
    const bool sender = g.index == c.from;
    const std::string id_key = "nccl/channel/" + std::to_string(g.id) + "/" + std::to_string(c.from) + "/" +
                               std::to_string(c.to) + "/" + std::to_string(c.channel);
    ncclUniqueId id;
    if (sender) {
      PTRAIN_DIST_CHECK(ncclGetUniqueId(&id));
      store_->set(id_key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      read_unique_id(store_->get(id_key, timeout_), id);
    }
    if (sender) {
      cudaStream_t stream = nullptr;
      PTRAIN_DIST_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      send_streams_[key] = stream;
    }
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      throw_if_aborted();
      ncclConfig_t config = nonblocking_config();
      ncclComm_t comm = nullptr;
      PTRAIN_DIST_CHECK(ncclCommInitRankConfig(&comm, 2, id, sender ? 0 : 1, &config));
      comms_[key] = {comm, name};
      settle(comm, "creating a channel's communicator");
    }
    warm_up(key, sender, message_bytes);
  }

  // An error unwinds past device work in flight (a send abandoned, receives the compute stream waits
  // for): abort, so that NCCL's kernels end instead of waiting for peers that will never match, and
  // freeing the step's buffers (which waits for the device) does not hang until the watchdog fires.
  void abandon_in_flight() noexcept override {
    reap();
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      if (pending_.empty()) return;
    }
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    abort_all("an error on this rank left collectives in flight");
  }

  void do_all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op,
                     bool overlap) override {
    const std::size_t bytes = count * elem_size(type);
    run(
        key_of(g), data, {data, bytes, 0, bytes},
        [&](void* buf, ncclComm_t comm, cudaStream_t s) {
          PTRAIN_DIST_CHECK(ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), comm, s));
        },
        nullptr, overlap);
  }

  // In place, NCCL's convention: rank i's result is chunk i of the buffer it sent.
  void do_reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type,
                         bool overlap) override {
    const std::size_t bytes = chunk * elem_size(type) * static_cast<std::size_t>(g.size());
    run(
        key_of(g), data, {data, bytes, 0, bytes},
        [&](void* buf, ncclComm_t comm, cudaStream_t s) {
          void* mine = static_cast<char*>(buf) + static_cast<std::size_t>(g.index) * chunk * elem_size(type);
          PTRAIN_DIST_CHECK(ncclReduceScatter(buf, mine, chunk, nccl_type(type), ncclSum, comm, s));
        },
        nullptr, overlap);
  }

  void do_all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, bool overlap) override {
    const std::size_t bytes = chunk * elem_size(type) * static_cast<std::size_t>(g.size());
    run(
        key_of(g), data, {data, bytes, 0, bytes},
        [&](void* buf, ncclComm_t comm, cudaStream_t s) {
          const void* mine =
              static_cast<const char*>(buf) + static_cast<std::size_t>(g.index) * chunk * elem_size(type);
          PTRAIN_DIST_CHECK(ncclAllGather(mine, buf, chunk, nccl_type(type), comm, s));
        },
        nullptr, overlap);
  }

  // Grouped sends and receives. `in` and `out` must be the same kind of memory (a side with nothing
  // to move may be null); staged, they lie one after the other in the scratch.
  void do_all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                      const std::vector<std::size_t>& recv_counts) override {
    const std::size_t sent = total(send_counts), received = total(recv_counts);
    const bool in_device = is_device(in), out_device = is_device(out);
    if (in != nullptr && out != nullptr && in_device != out_device)
      throw DistError("all_to_allv: `in` and `out` must both be device memory or both host memory");
    const bool staged = !in_device && !out_device;
    run(
        key_of(g), in_device ? static_cast<const void*>(in) : out,
        {in, sent * sizeof(float), sent * sizeof(float), received * sizeof(float)},
        [&](void* buf, ncclComm_t comm, cudaStream_t s) {
          const float* from = staged ? static_cast<const float*>(buf) : in;
          float* to = staged ? static_cast<float*>(buf) + sent : out;
          PTRAIN_DIST_CHECK(ncclGroupStart());
          for (std::size_t peer = 0; peer < send_counts.size(); ++peer) {
            if (send_counts[peer] > 0)
              PTRAIN_DIST_CHECK(ncclSend(from, send_counts[peer], ncclFloat32, static_cast<int>(peer), comm, s));
            if (recv_counts[peer] > 0)
              PTRAIN_DIST_CHECK(ncclRecv(to, recv_counts[peer], ncclFloat32, static_cast<int>(peer), comm, s));
            from += send_counts[peer];
            to += recv_counts[peer];
          }
          PTRAIN_DIST_CHECK(ncclGroupEnd());
        },
        out);
  }

  void do_broadcast(const Group& g, void* data, std::size_t bytes, int root) override {
    run(key_of(g), data, {data, bytes, 0, bytes}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
      PTRAIN_DIST_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm, s));
    });
  }

  void do_send(const Group& g, const void* data, std::size_t bytes, int peer, int channel) override {
    const Route route = route_of(g, g.index, peer, channel);
    run(route.key, data, {data, bytes, 0, 0}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
      PTRAIN_DIST_CHECK(ncclSend(buf, bytes, ncclUint8, route.peer, comm, s));
    });
  }

  void do_recv(const Group& g, void* data, std::size_t bytes, int peer, int channel) override {
    const Route route = route_of(g, peer, g.index, channel);
    run(route.key, data, {nullptr, 0, 0, bytes}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
      PTRAIN_DIST_CHECK(ncclRecv(buf, bytes, ncclUint8, route.peer, comm, s));
    });
  }

  // From device memory on an opened channel: enqueued on the channel's stream after the work on the
  // compute stream, and left in flight; waiting orders the compute stream after it (the buffer may
  // be written again), the host goes on. (The log marks the send done when it is waited for, and
  // again with its true end once the watchdog sees the device finish it.) Otherwise a send at once.
  std::function<void()> do_isend(const Group& g, const void* data, std::size_t bytes, int peer,
                                 int channel) override {
    const Route route = route_of(g, g.index, peer, channel);
    const auto stream = send_streams_.find(route.key);
    if (stream == send_streams_.end() || !is_device(data)) {
      do_send(g, data, bytes, peer, channel);
      return {};
    }
    reap();
    auto enqueue = [&](void* buf, ncclComm_t comm, cudaStream_t s) {
      PTRAIN_DIST_CHECK(ncclSend(buf, bytes, ncclUint8, route.peer, comm, s));
    };
    const Ticket ticket = run_on_device(route.key, const_cast<void*>(data), enqueue, true, stream->second);
    return [this, ticket] { join(ticket); };
  }

  // One element all-reduced on the scratch, waited for on the host.
  void do_barrier(const Group& g) override {
    run(key_of(g), nullptr, {nullptr, 0, 0, 0}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
      PTRAIN_DIST_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, s));
    });
  }

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

  Route route_of(const Group& g, int from, int to, int channel) {
    const CommKey opened{g.id, from, to, channel};
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    throw_if_aborted();
    if (comms_.count(opened) != 0) return {opened, g.index == from ? 1 : 0};
    if (channel != 0)
      throw DistError("channel " + std::to_string(channel) + " from rank " + std::to_string(from) +
                      " to rank " + std::to_string(to) + " of group " + g.name +
                      " was not opened (open_channels)");
    return {key_of(g), g.index == from ? to : from};
  }

  // NCCL connects a pair on its first message, and issuing that message waits until the peer issues
  // its side: the pipeline's first send would block the host. So both ends exchange one message of
  // the channel's size here (they reach this at the same point of the shared list), connecting
  // every path a message of that size takes.
  void warm_up(const CommKey& key, bool sender, std::size_t bytes) {
    bytes = std::max<std::size_t>(bytes, 1);
    void* buffer = nullptr;
    PTRAIN_DIST_CHECK(cudaMalloc(&buffer, bytes));
    try {
      issue(key, [&](ncclComm_t comm) {
        if (sender)
          PTRAIN_DIST_CHECK(ncclSend(buffer, bytes, ncclUint8, 1, comm, comm_stream_));
        else
          PTRAIN_DIST_CHECK(ncclRecv(buffer, bytes, ncclUint8, 0, comm, comm_stream_));
      });
      PTRAIN_DIST_CHECK(cudaEventRecord(staged_, comm_stream_));
      wait(key, staged_);
    } catch (...) {
      cudaFree(buffer);
      throw;
    }
    PTRAIN_DIST_CHECK(cudaFree(buffer));
  }

  static void read_unique_id(const std::vector<char>& value, ncclUniqueId& id) {
    if (value.size() != sizeof id.internal)
      throw DistError("an NCCL unique id in the store has " + std::to_string(value.size()) + " bytes, not " +
                      std::to_string(sizeof id.internal));
    std::memcpy(id.internal, value.data(), sizeof id.internal);
  }

  static std::size_t total(const std::vector<std::size_t>& counts) {
    std::size_t sum = 0;
    for (std::size_t c : counts) sum += c;
    return sum;
  }

  // Device (or managed) memory of this process's device; host memory otherwise. Any other failure
  // to tell (a sticky CUDA error) is an error: taking a device pointer for host memory would crash.
  bool is_device(const void* ptr) const {
    if (ptr == nullptr) return false;
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
    if (status == cudaErrorInvalidValue) {  // older runtimes' answer for plain host memory
      cudaGetLastError();
      return false;
    }
    PTRAIN_DIST_CHECK(status);
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) return false;
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_)
      throw DistError("a collective got memory of device " + std::to_string(attributes.device) +
                      ", this rank runs on " + std::to_string(device_));
    return true;
  }

  // Runs one collective. `enqueue(buffer, comm, stream)` issues it on the comm stream; `buffer` is
  // the caller's data when `data` is device memory, else the device scratch. `out` is where staged
  // results go (default: `data`). `overlap`: see run_on_device (staged collectives are waited for).
  template <typename Enqueue>
  void run(const CommKey& key, const void* data, Staging staging, Enqueue&& enqueue, void* out = nullptr,
           bool overlap = false) {
    reap();
    if (is_device(data)) {
      run_on_device(key, const_cast<void*>(data), enqueue, overlap, comm_stream_);
      return;
    }
    run_staged(key, staging, out != nullptr ? out : const_cast<void*>(data), enqueue);
  }

  // On `stream` (the comm stream, or a channel's for its sends), ordered after the work already on
  // the compute stream and, unless `overlap` (then the caller joins the ticket returned), before
  // the work enqueued after it, with events only: the host goes on at once and the watchdog
  // follows the collective.
  template <typename Enqueue>
  Ticket run_on_device(const CommKey& key, void* data, Enqueue& enqueue, bool overlap, cudaStream_t stream) {
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
  int stream_track(cudaStream_t stream) const {
    if (stream == comm_stream_) return Trace::kCommStream;
    int n = 0;
    for (const auto& entry : send_streams_) {
      if (entry.second == stream) break;
      ++n;
    }
    return Trace::send_stream_track(n);
  }

  // Host memory: through the device scratch, and waited for, since the caller reads the result
  // when the call returns. Host data depends on nothing on the compute stream, so no event.
  template <typename Enqueue>
  void run_staged(const CommKey& key, Staging staging, void* out, Enqueue& enqueue) {
    char* scratch = reserve(std::max(staging.in_bytes, staging.out_offset + staging.out_bytes));
    if (staging.in_bytes > 0) {
      std::memcpy(pinned_, staging.in, staging.in_bytes);
      PTRAIN_DIST_CHECK(cudaMemcpyAsync(scratch, pinned_, staging.in_bytes, cudaMemcpyHostToDevice, comm_stream_));
    }
    const std::uint64_t traced = trace_mark(comm_stream_);
    issue(key, [&](ncclComm_t comm) { enqueue(scratch, comm, comm_stream_); });
    trace_device(traced, trace_mark(comm_stream_), Trace::kCommStream);
    if (staging.out_bytes > 0)
      PTRAIN_DIST_CHECK(cudaMemcpyAsync(pinned_ + staging.out_offset, scratch + staging.out_offset, staging.out_bytes,
                                        cudaMemcpyDeviceToHost, comm_stream_));
    PTRAIN_DIST_CHECK(cudaEventRecord(staged_, comm_stream_));
    wait(key, staged_);
    if (staging.out_bytes > 0) std::memcpy(out, pinned_ + staging.out_offset, staging.out_bytes);
  }

  // The device scratch and its pinned host mirror, grown on demand (rarely: they carry scalars and
  // small messages; the minimum covers the barrier's element). Only synchronous collectives use
  // them, so nothing in flight does.
  char* reserve(std::size_t bytes) {
    if (scratch_ != nullptr && bytes <= staging_bytes_) return scratch_;
    const std::size_t size = std::max({bytes, 2 * staging_bytes_, kMinStagingBytes});
    if (scratch_ != nullptr) PTRAIN_DIST_CHECK(cudaFreeAsync(std::exchange(scratch_, nullptr), comm_stream_));
    if (pinned_ != nullptr) PTRAIN_DIST_CHECK(cudaFreeHost(std::exchange(pinned_, nullptr)));
    staging_bytes_ = 0;
    void* device = nullptr;
    void* host = nullptr;
    PTRAIN_DIST_CHECK(cudaMallocAsync(&device, size, comm_stream_));
    scratch_ = static_cast<char*>(device);
    PTRAIN_DIST_CHECK(cudaMallocHost(&host, size));
    pinned_ = static_cast<char*>(host);
    staging_bytes_ = size;
    return scratch_;
  }

  // Issues NCCL calls on the communicator of `key`, then waits until NCCL has put them on the
  // stream: a non-blocking communicator may return ncclInProgress and go on issuing in the
  // background, and an event recorded before that is done would not follow the collective.
  template <typename Fn>
  void issue(const CommKey& key, Fn&& fn) {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    throw_if_aborted();
    ncclComm_t comm = comms_.at(key).handle;
    fn(comm);
    settle(comm, "issuing the collective");
  }

  // Polls `comm` until its background work is done, bounded by the timeout (then every
  // communicator is aborted). Needs nccl_mutex_.
  void settle(ncclComm_t comm, const char* what) {
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
  void wait(const CommKey& key, cudaEvent_t event) {
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

  // The compute stream waits for `done`, work of group `group`, between two timing events that
  // measure how long it stood still (see Comm::settle_device_waits).
  void compute_waits_for(cudaEvent_t done, int group) {
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

  cudaEvent_t take_event() {
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

  // Retires the collectives the device has finished (in any order: sends in flight on a channel's
  // stream may finish after later work on the comm stream), marking them done in the log. Returns a
  // failure message if one failed, or if the oldest unfinished one is older than the timeout, else "".
  std::string reap() {
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
  std::string async_error() {
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

  void watch() {
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
  void fail(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      if (aborted_) return;  // a synchronous wait got there first and throws to its caller
      abort_all(what);
    }
    if (on_failure_) on_failure_(what, log().dump());
  }

  // Needs nccl_mutex_. Children before the world, which they were split from.
  void abort_all(const std::string& reason) {
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) ncclCommAbort(it->second.handle);
    comms_.clear();
  }

  void throw_if_aborted() const {
    if (aborted_) throw DistError("the NCCL communicators were aborted: " + abort_reason_);
  }

  // A healthy end: finalize (flushes what is in flight, polled against the timeout) and destroy,
  // children first; whatever does not finalize in time is aborted.
  void close_communicators() {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) {
      ncclComm_t comm = it->second.handle;
      ncclResult_t state = ncclCommFinalize(comm);
      const auto deadline = Clock::now() + timeout_;
      for (Backoff backoff; state == ncclInProgress && Clock::now() < deadline;) {
        backoff.pause();
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
      }
      if (state == ncclSuccess) ncclCommDestroy(comm);
      else ncclCommAbort(comm);
    }
    comms_.clear();
  }

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

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(StoreClient& store, int rank, int world, const NcclOptions& options) {
  auto comm = std::make_unique<NcclComm>(rank, world, options);
  try {
    comm->start(store);
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(rank) + ": connecting to the other " + std::to_string(world - 1) +
                    " ranks through NCCL failed: " + e.what());
  }
  return comm;
}

std::string current_cuda_device_uuid() {
  int device = -1;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = "GPU-";
  for (const char byte : prop.uuid.bytes) {
    const auto b = static_cast<unsigned char>(byte);
    text += kHex[b >> 4];
    text += kHex[b & 15];
  }
  return text;
}

int visible_cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace ptrain::dist
