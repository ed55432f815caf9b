// NcclComm's point to point (nccl_comm_impl.h): the channels' communicators of two ranks and their
// senders' streams, and the sends and receives, on a channel or the group's communicator.
#include "engine/comm/nccl_comm_impl.h"

#include <cstdlib>

#include "engine/comm/nccl_calls.h"

namespace ptrain::dist {

using namespace nccl;  // nccl_calls.h

// A communicator of two ranks (the sender is its rank 0), from a unique id the sender publishes
// through the store, warmed up with one message; the sender also gets a stream for its sends.
void NcclComm::do_open_channel(const Group& g, const Channel& c, std::size_t message_bytes) {
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

NcclComm::Route NcclComm::route_of(const Group& g, int from, int to, int channel) {
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
void NcclComm::warm_up(const CommKey& key, bool sender, std::size_t bytes) {
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

void NcclComm::do_send(const Group& g, const void* data, std::size_t bytes, int peer, int channel) {
  const Route route = route_of(g, g.index, peer, channel);
  run(route.key, data, {data, bytes, 0, 0}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
    PTRAIN_DIST_CHECK(ncclSend(buf, bytes, ncclUint8, route.peer, comm, s));
  });
}

void NcclComm::do_recv(const Group& g, void* data, std::size_t bytes, int peer, int channel) {
  const Route route = route_of(g, peer, g.index, channel);
  run(route.key, data, {nullptr, 0, 0, bytes}, [&](void* buf, ncclComm_t comm, cudaStream_t s) {
    PTRAIN_DIST_CHECK(ncclRecv(buf, bytes, ncclUint8, route.peer, comm, s));
  });
}

// From device memory on an opened channel: enqueued on the channel's stream after the work on the
// compute stream, and left in flight; waiting orders the compute stream after it (the buffer may
// be written again), the host goes on. (The log marks the send done when it is waited for, and
// again with its true end once the watchdog sees the device finish it.) Otherwise a send at once.
std::function<void()> NcclComm::do_isend(const Group& g, const void* data, std::size_t bytes, int peer,
                                          int channel) {
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

}  // namespace ptrain::dist
