// The rendezvous store: rank 0 hosts a TCP key-value store (StoreServer), every rank (rank 0
// included) talks to it through one StoreClient. Used for Gloo's connection setup, NCCL unique ids,
// checkpoint coordination and abort flags. Every connection must present the job token first.
//
// Wire protocol, version 1. Integers are big-endian; i64 is two's complement.
//   Handshake, client -> server: "PTRS" | u8 version (1) | u32 token_len (<= 4 KiB) | token bytes
//             server -> client: u8 0 when accepted; on a wrong token u8 1, then close; with the
//             right token but every client connection in use (see the limits below) u8 2, then
//             close; on anything else (bad magic or version, oversized length, nothing within the
//             handshake timeout): close.
//   Request: u8 op | body. The client sends one request and reads its reply before the next.
//     SET   1: u32 klen | key | u64 vlen | value                 -> OK
//     GET   2: u32 klen | key | u64 timeout_ms                   -> OK | u64 vlen | value, or TIMEOUT
//     WAIT  3: u32 n | n x (u32 klen | key) | u64 timeout_ms     -> OK, or TIMEOUT
//     ADD   4: u32 klen | key | i64 delta                        -> OK | i64 new value, or ERROR
//     CHECK 5: u32 n | n x (u32 klen | key)                      -> OK | u8 all_present (0 or 1)
//   Reply status: u8 OK = 0, TIMEOUT = 1, ERROR = 2 (followed by u32 mlen | message).
//   GET and WAIT wait on the server (no polling); the server answers TIMEOUT at the deadline.
//   ADD keeps the counter as decimal text, so GET reads it. Keys are at most 4 KiB, values at most
//   256 MiB, n at most 65536; a message over a cap, or an unknown op, drops that connection only.
// Connection limits, so that whatever connects, the host keeps descriptors for its job's own work:
//   at most kStoreMaxPendingConnections connections that have not finished the handshake (one more
//   drops the oldest of them, which has had the most time), and at most `max_clients`
//   authenticated ones (the rendezvous allows kStoreClientsPerRank per rank of the job; a rank
//   opens two). So a flood of idle connections holds at most 64 descriptors, each for at most the
//   handshake timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/launch/dist_error.h"

namespace ptrain::dist {

inline constexpr std::size_t kStoreMaxKeyBytes = 4096;
inline constexpr std::size_t kStoreMaxValueBytes = std::size_t{256} << 20;
inline constexpr std::size_t kStoreMaxKeysPerRequest = 65536;
inline constexpr std::size_t kStoreMaxPendingConnections = 64;
inline constexpr std::size_t kStoreClientsPerRank = 4;
inline constexpr std::size_t kStoreDefaultMaxClients = 256;  // a server not told its job's size
inline constexpr std::chrono::milliseconds kStoreHandshakeTimeout = std::chrono::seconds(5);

// Serves the store from one background thread (a poll() loop over non-blocking sockets). The
// destructor wakes the loop, closes every connection (blocked clients then fail promptly) and joins.
class StoreServer {
 public:
  // Takes ownership of `listen_fd`, an already bound and listening TCP socket (see listen_socket).
  // `max_clients`: authenticated connections served at once (see the limits above).
  StoreServer(int listen_fd, std::string token,
              std::chrono::milliseconds handshake_timeout = kStoreHandshakeTimeout,
              std::size_t max_clients = kStoreDefaultMaxClients);
  // Binds to exactly `address` (numeric IPv4/IPv6 or a host name; "0.0.0.0" for every interface)
  // and `port` (0 = any free port, see port()).
  StoreServer(const std::string& address, int port, std::string token,
              std::chrono::milliseconds handshake_timeout = kStoreHandshakeTimeout,
              std::size_t max_clients = kStoreDefaultMaxClients);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // The port the server listens on.
  int port() const { return port_; }

  // A TCP socket bound to `address`:`port` and listening, for the launcher to create before it
  // spawns rank 0. The caller owns the fd. It is created close-on-exec: to hand it to a child,
  // clear FD_CLOEXEC in that child only (or dup2 it there) so other children do not inherit it.
  static int listen_socket(const std::string& address, int port);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// One TCP connection to the store. Every operation is thread-safe (serialized by a mutex) and
// throws DistError when the store cannot answer: a timeout, a refused token, or a closed connection.
// After a transport failure the client stays closed; every later operation throws.
class StoreClient {
 public:
  // Connects, retrying until `connect_timeout` (the server may start later), and presents `token`.
  // `stall_timeout`: how long a request may wait for the server beyond its own waiting (a server that
  // stopped answering: its process stopped or hung); 60 s when not given.
  StoreClient(std::string host, int port, std::string token, std::chrono::milliseconds connect_timeout,
              std::optional<std::chrono::milliseconds> stall_timeout = std::nullopt);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  void set(const std::string& key, const std::string& value);
  // Waits until `key` exists, then returns its value.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Adds `delta` to the counter at `key` (absent = 0) and returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // True if every key exists; does not wait.
  bool check(const std::vector<std::string>& keys);

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "host:port", "[v6 address]:port", for messages.
  std::string endpoint() const;

 private:
  // op | keys (counted for WAIT and CHECK), after checking the caps.
  std::vector<char> encode(char op, const std::vector<std::string>& keys) const;
  // Sends `request` and reads the reply status, allowing `wait` of server-side waiting.
  char roundtrip(std::vector<char>& request, std::chrono::milliseconds wait);
  void recv_exact(char* data, std::size_t size, std::chrono::steady_clock::time_point deadline);
  // Closes the connection (it is out of step now) and throws "store at host:port <what>".
  [[noreturn]] void fail(const std::string& what);

  std::string host_;
  int port_;
  std::chrono::milliseconds stall_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace ptrain::dist
