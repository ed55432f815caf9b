// StoreClient: one connection to the rendezvous store (protocol in store.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "engine/rendezvous/store.h"
#include "engine/rendezvous/store_wire.h"

namespace ptrain::dist {

using namespace wire;

namespace {

// One attempt to connect to each address of host:port; -1 with `error` set on failure. A host
// that is not known here (not a lookup that failed for now) is the job's mistake, as where the
// store runs (StoreServer::listen_socket): waiting for it until the timeout helps nobody.
int try_connect(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  bool unknown = false;
  const AddrInfoList list = resolve(host, port, error, &unknown);
  if (list == nullptr && unknown) throw LaunchConfigError("store client: " + error);
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      error = errno_text("socket");
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        error = std::strerror(errno);
        continue;
      }
      // Every attempt gets a fair chance, even right at the deadline.
      const auto left = std::max(deadline - Clock::now(), Clock::duration(milliseconds(200)));
      pollfd p{fd.get(), POLLOUT, 0};
      int so_error = ETIMEDOUT;
      socklen_t len = sizeof so_error;
      if (::poll(&p, 1, static_cast<int>(std::chrono::ceil<milliseconds>(left).count())) == 1) {
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
      }
      if (so_error != 0) {
        error = std::strerror(so_error);
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd.release();
  }
  return -1;
}

}  // namespace

StoreClient::StoreClient(std::string host, int port, std::string token, milliseconds connect_timeout,
                         std::optional<milliseconds> stall_timeout)
    : host_(std::move(host)), port_(port), stall_(stall_timeout.value_or(kStallTimeout)) {
  if (host_.empty() || port_ <= 0 || port_ > 65535) {
    throw DistError("store client: invalid store address '" + endpoint() +
                    "' (need a host and a port 1-65535)");
  }
  check_token(token, "store client");
  connect_timeout = clamp_timeout(connect_timeout);
  const auto deadline = Clock::now() + connect_timeout;
  std::string error;
  for (milliseconds backoff(10); (fd_ = try_connect(host_, port_, deadline, error)) < 0;
       backoff = std::min(backoff * 2, milliseconds(500))) {
    const auto now = Clock::now();
    if (now >= deadline) {
      throw DistError("cannot connect to the store at " + endpoint() + " within " + ms_text(connect_timeout) +
                      ": " + error);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
  }
  UniqueFd guard(fd_);
  std::vector<char> hello(kMagic, kMagic + 4);
  hello.push_back(kVersion);
  put_key(hello, token);
  // Rank 0 may still be starting while the kernel holds our connection: wait up to the deadline.
  const auto reply_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(1));
  char answer = 0;
  error = transfer(fd_, hello.data(), hello.size(), true, reply_deadline);
  if (error.empty()) error = transfer(fd_, &answer, 1, false, reply_deadline);
  fd_ = -1;  // until accepted: the guard closes it
  if (error.empty() && answer == kFull) {
    throw DistError("store at " + endpoint() +
                    " has no room for another client: every connection it allows is in use (is a second "
                    "job with the same token using this port?)");
  }
  // A wrong token is final, whatever the deadline: this store belongs to someone else.
  if (error.empty() && answer == kRejected) {
    throw DistError("store at " + endpoint() +
                    " rejected the job token: it is another job's store, or this job's ranks were given "
                    "different tokens (give each job its own MASTER_PORT, and every rank of a job the "
                    "same PTRAIN_JOB_TOKEN)");
  }
  if (error.empty() && answer != kAccepted) error = "bad reply";
  if (!error.empty()) throw DistError("store at " + endpoint() + " refused the handshake: " + error);
  fd_ = guard.release();
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string StoreClient::endpoint() const {
  return join_host_port(host_, port_);
}

void StoreClient::fail(const std::string& what) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  throw DistError("store at " + endpoint() + " " + what);
}

void StoreClient::recv_exact(char* data, std::size_t size, Clock::time_point deadline) {
  if (auto error = transfer(fd_, data, size, false, deadline); !error.empty()) fail(error);
}

std::vector<char> StoreClient::encode(char op, const std::vector<std::string>& keys) const {
  if (keys.size() > kStoreMaxKeysPerRequest) {
    throw DistError("store request for " + std::to_string(keys.size()) + " keys is over the cap");
  }
  std::vector<char> request{op};
  if (op == kWait || op == kCheck) put_be(request, keys.size(), 4);
  for (const auto& key : keys) {
    if (key.size() > kStoreMaxKeyBytes) {
      throw DistError("store key " + quote(key) + " of " + std::to_string(key.size()) +
                      " bytes is over the cap");
    }
    put_key(request, key);
  }
  return request;
}

char StoreClient::roundtrip(std::vector<char>& request, milliseconds wait) {
  if (fd_ < 0) throw DistError("store client for " + endpoint() + " is closed after an earlier failure");
  if (auto error = transfer(fd_, request.data(), request.size(), true, Clock::now() + stall_);
      !error.empty()) {
    fail(error);
  }
  char status = 0;
  recv_exact(&status, 1, Clock::now() + wait + stall_);
  if (status == kError) {
    char len[4];
    recv_exact(len, 4, Clock::now() + stall_);
    std::string message(std::min<std::uint64_t>(get_be(len, 4), kStoreMaxKeyBytes), '\0');
    recv_exact(message.data(), message.size(), Clock::now() + stall_);
    throw DistError("store at " + endpoint() + ": " + message);
  }
  if (status != kOk && status != kTimeout) fail("sent an unknown reply status " + std::to_string(status));
  return status;
}

void StoreClient::set(const std::string& key, const std::vector<char>& value) {
  if (value.size() > kStoreMaxValueBytes) {
    throw DistError("store value of " + std::to_string(value.size()) + " bytes for key " + quote(key) +
                    " is over the cap");
  }
  auto request = encode(kSet, {key});
  put_be(request, value.size(), 8);
  request.insert(request.end(), value.begin(), value.end());
  std::lock_guard lock(mutex_);
  roundtrip(request, milliseconds(0));
}

void StoreClient::set(const std::string& key, const std::string& value) {
  set(key, std::vector<char>(value.begin(), value.end()));
}

std::vector<char> StoreClient::get(const std::string& key, milliseconds timeout) {
  timeout = clamp_timeout(timeout);
  auto request = encode(kGet, {key});
  put_be(request, static_cast<std::uint64_t>(timeout.count()), 8);
  std::lock_guard lock(mutex_);
  if (roundtrip(request, timeout) == kTimeout) {
    throw DistError("timed out after " + ms_text(timeout) + " waiting for key " + quote(key) +
                    " in the store at " + endpoint());
  }
  char len[8];
  recv_exact(len, 8, Clock::now() + stall_);
  if (get_be(len, 8) > kStoreMaxValueBytes) fail("sent a malformed reply");
  std::vector<char> value(get_be(len, 8));
  recv_exact(value.data(), value.size(), Clock::now() + stall_);
  return value;
}

void StoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  timeout = clamp_timeout(timeout);
  auto request = encode(kWait, keys);
  put_be(request, static_cast<std::uint64_t>(timeout.count()), 8);
  std::lock_guard lock(mutex_);
  if (roundtrip(request, timeout) == kTimeout) {
    std::string names;
    for (std::size_t i = 0; i < keys.size() && i < 5; ++i) names += (i > 0 ? ", " : "") + quote(keys[i]);
    if (keys.size() > 5) names += ", ... (" + std::to_string(keys.size()) + " keys)";
    throw DistError("timed out after " + ms_text(timeout) + " waiting for keys " + names +
                    " in the store at " + endpoint());
  }
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  auto request = encode(kAdd, {key});
  put_be(request, static_cast<std::uint64_t>(delta), 8);
  std::lock_guard lock(mutex_);
  if (roundtrip(request, milliseconds(0)) != kOk) fail("sent a malformed reply");
  char value[8];
  recv_exact(value, 8, Clock::now() + stall_);
  return static_cast<std::int64_t>(get_be(value, 8));
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  auto request = encode(kCheck, keys);
  std::lock_guard lock(mutex_);
  if (roundtrip(request, milliseconds(0)) != kOk) fail("sent a malformed reply");
  char present = 0;
  recv_exact(&present, 1, Clock::now() + stall_);
  return present != 0;
}

}  // namespace ptrain::dist
