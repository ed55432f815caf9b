// NcclComm's life (nccl_comm_impl.h): its streams and the world communicator, the groups split from
// it, the healthy close; and the functions nccl_comm.h hands out.
#include "engine/comm/nccl_comm.h"

#include "engine/comm/nccl_calls.h"
#include "engine/comm/nccl_comm_impl.h"

namespace ptrain::dist {

using namespace nccl;  // nccl_calls.h

namespace {

constexpr const char* kUniqueIdKey = "nccl/world/unique_id";  // the store serves one job

}  // namespace

NcclComm::~NcclComm() {
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

// Creates the streams and the world communicator (rank 0's unique id goes through the store),
// then starts the watchdog. Separate from the constructor so that the destructor cleans up
// whatever a failure here leaves.
void NcclComm::start(StoreClient& store) {
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

// A split is collective over the world communicator: non-members take part with no colour.
void NcclComm::connect(const Group& g) {
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

// A healthy end: finalize (flushes what is in flight, polled against the timeout) and destroy,
// children first; whatever does not finalize in time is aborted.
void NcclComm::close_communicators() {
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
