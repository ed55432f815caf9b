#include "engine/rendezvous/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>

#include "engine/rendezvous/store_wire.h"
#include "engine/log/log.h"

namespace ptrain::dist {

using namespace wire;

namespace {

// "host:port" of a socket address; `port` receives the port.
std::string address_text(const sockaddr_storage& addr, socklen_t len, int* port = nullptr) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown address";
  }
  const int number = std::stoi(serv);
  if (port != nullptr) *port = number;
  return join_host_port(host, number);
}

// Reads one message from the bytes received so far. Each getter returns false when its bytes have
// not all arrived yet, or, with `error` set, when the message is invalid.
struct Reader {
  explicit Reader(const std::vector<char>& in) : data(in.data()), size(in.size()) {}
  const char* data;
  std::size_t size, pos = 0;
  std::string error;

  bool fail(std::string why) {
    error = std::move(why);
    return false;
  }
  bool span(std::uint64_t n, const char*& p) {
    if (size - pos < n) return false;
    p = data + pos;
    pos += n;
    return true;
  }
  bool uint(std::uint64_t& v, int bytes) {
    const char* p = nullptr;
    if (!span(static_cast<std::uint64_t>(bytes), p)) return false;
    v = get_be(p, bytes);
    return true;
  }
  bool bytes(std::string& s, std::uint64_t cap, const char* what) {
    std::uint64_t n = 0;
    const char* p = nullptr;
    if (!uint(n, 4)) return false;
    if (n > cap) return fail(std::string(what) + " of " + std::to_string(n) + " bytes is over the cap");
    if (!span(n, p)) return false;
    s.assign(p, n);
    return true;
  }
};

bool parse_handshake(Reader& r, std::string& token) {
  std::uint64_t b = 0;
  for (char m : kMagic) {
    if (!r.uint(b, 1)) return false;
    if (b != static_cast<std::uint64_t>(m)) return r.fail("not a ptrain store handshake");
  }
  if (!r.uint(b, 1)) return false;
  if (b != kVersion) return r.fail("unsupported protocol version " + std::to_string(b));
  return r.bytes(token, kStoreMaxKeyBytes, "token");
}

struct Request {
  char op = 0;
  std::vector<std::string> keys;
  std::vector<char> value;
  std::uint64_t number = 0;  // timeout_ms for GET and WAIT, delta for ADD
};

bool parse_request(Reader& r, Request& q) {
  std::uint64_t n = 0;
  if (!r.uint(n, 1)) return false;
  q.op = static_cast<char>(n);
  if (q.op == kWait || q.op == kCheck) {
    if (!r.uint(n, 4)) return false;
    if (n > kStoreMaxKeysPerRequest)
      return r.fail(std::to_string(n) + " keys in one request is over the cap");
  } else if (q.op == kSet || q.op == kGet || q.op == kAdd) {
    n = 1;
  } else {
    return r.fail("unknown request op " + std::to_string(n));
  }
  q.keys.resize(n);
  for (auto& key : q.keys) {
    if (!r.bytes(key, kStoreMaxKeyBytes, "key")) return false;
  }
  if (q.op == kCheck) return true;
  if (!r.uint(q.number, 8)) return false;
  if (q.op != kSet) return true;
  const char* p = nullptr;
  if (q.number > kStoreMaxValueBytes)
    return r.fail("value of " + std::to_string(q.number) + " bytes is over the cap");
  if (!r.span(q.number, p)) return false;
  q.value.assign(p, p + q.number);
  return true;
}

// Takes the same time whatever the presented token holds, so timing reveals nothing of the secret.
bool tokens_equal(const std::string& presented, const std::string& expected) {
  unsigned diff = presented.size() == expected.size() ? 0u : 1u;
  for (std::size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

// ------------------------------------------------------------------------------------------ server

struct Connection {
  UniqueFd fd;
  std::string peer;
  bool authenticated = false, closed = false, waiting = false;
  Clock::time_point handshake_deadline, wait_deadline;
  Request wait;           // the GET or WAIT that is waiting for its keys
  std::vector<char> in;   // received, not yet parsed
  std::vector<char> out;  // replies not yet sent, from out_pos on
  std::size_t out_pos = 0;
};

}  // namespace

struct StoreServer::Impl {
  UniqueFd listen_fd, wake_read, wake_write;
  std::string token;
  milliseconds handshake_timeout{};
  std::size_t max_clients = 0;
  std::size_t pending = 0, clients = 0;  // open connections before and after the handshake
  std::size_t evicted = 0;               // pending connections dropped for the cap, not yet reported
  Clock::time_point next_eviction_note{};
  std::atomic<bool> stop{false};
  std::thread thread;
  std::vector<std::unique_ptr<Connection>> conns;
  std::unordered_map<std::string, std::vector<char>> data;
  Clock::time_point accept_paused_until{};

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      log::store().error("the store stopped: {}", e.what());
    }
    conns.clear();  // closes every connection, so clients fail instead of waiting
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Connection*> polled;
    while (true) {
      auto now = Clock::now();
      const bool accepting = now >= accept_paused_until;
      auto next = accepting ? Clock::time_point::max() : accept_paused_until;
      fds.assign({pollfd{wake_read.get(), POLLIN, 0}, pollfd{accepting ? listen_fd.get() : -1, POLLIN, 0}});
      polled.clear();
      for (auto& c : conns) {
        fds.push_back(pollfd{c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
        polled.push_back(c.get());
        if (!c->authenticated) next = std::min(next, c->handshake_deadline);
        if (c->waiting) next = std::min(next, c->wait_deadline);
      }
      if (evicted > 0) next = std::min(next, next_eviction_note);
      const long long wait_ms =
          next == Clock::time_point::max()
              ? -1
              : std::clamp<long long>(std::chrono::ceil<milliseconds>(next - now).count(), 0, INT_MAX);
      if (::poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0) {
        if (errno == EINTR) continue;
        throw DistError(errno_text("poll"));
      }
      if (fds[0].revents != 0) {
        char buf[64];
        while (::read(wake_read.get(), buf, sizeof buf) > 0) {
        }
        if (stop.load()) return;
      }
      for (std::size_t i = 0; i < polled.size(); ++i) {
        Connection& c = *polled[i];
        const short revents = fds[i + 2].revents;
        if (!c.closed && (revents & POLLOUT)) flush(c);
        if (!c.closed && (revents & (POLLIN | POLLHUP | POLLERR))) read_from(c);
      }
      now = Clock::now();
      for (auto& c : conns) {
        if (!c->closed && !c->authenticated && now >= c->handshake_deadline) {
          drop(*c, "no handshake within " + ms_text(handshake_timeout));
        }
        if (!c->closed && c->waiting) finish_wait(*c, now);
      }
      // Answer what has arrived; a finished wait or a flushed reply can unblock more input.
      for (bool progress = true; progress;) {
        progress = false;
        for (auto& c : conns) progress = process(*c) || progress;
      }
      for (auto& c : conns) {
        if (!c->closed && c->in.size() > kMaxMessageBytes) drop(*c, "sent more than the largest message");
      }
      // New connections last: a client accepted in the previous turn has had its handshake read
      // by now, so a flood arriving meanwhile cannot push it out as the oldest pending one.
      if (fds[1].revents != 0) accept_all();
      note_evictions(Clock::now());
      std::erase_if(conns, [](const auto& c) { return c->closed; });
    }
  }

  void accept_all() {
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd =
          ::accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the listening socket stays readable, so pause rather than spin.
          log::store().warn(errno_text("cannot accept a connection"));
          accept_paused_until = Clock::now() + milliseconds(100);
        }
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Connection>();
      c->fd.reset(fd);
      c->peer = address_text(addr, len);
      c->handshake_deadline = Clock::now() + handshake_timeout;
      conns.push_back(std::move(c));
      if (++pending > kStoreMaxPendingConnections) evict_oldest_pending();
    }
  }

  // Over the cap of pending connections: the one that has waited longest has had the most time to
  // present the token. Dropped quietly; note_evictions reports how many.
  void evict_oldest_pending() {
    const auto oldest = std::find_if(conns.begin(), conns.end(),
                                     [](const auto& c) { return !c->closed && !c->authenticated; });
    if (oldest == conns.end()) return;  // cannot be: `pending` counts them
    close(**oldest);
    ++evicted;
  }

  // At most one line a second however many go.
  void note_evictions(Clock::time_point now) {
    if (evicted == 0 || now < next_eviction_note) return;
    log::store().warn("dropped {} connections without a handshake: more than {} were waiting for theirs at once",
                      evicted, kStoreMaxPendingConnections);
    evicted = 0;
    next_eviction_note = now + std::chrono::seconds(1);
  }

  void close(Connection& c) {
    if (!c.closed) --(c.authenticated ? clients : pending);
    c.fd.reset();
    c.closed = true;
    c.waiting = false;
  }

  void drop(Connection& c, const std::string& reason) {
    log::store().warn("dropped connection from {}: {}", c.peer, reason);
    close(c);
  }

  void read_from(Connection& c) {
    char buf[65536];
    // A bounded amount per turn keeps one fast sender from starving the others.
    for (std::size_t budget = 0; budget < (std::size_t{8} << 20);) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close(c);  // the peer left
        return;
      }
      try {
        c.in.insert(c.in.end(), buf, buf + n);
      } catch (const std::bad_alloc&) {
        return drop(c, "out of memory for its message");
      }
      budget += static_cast<std::size_t>(n);
    }
  }

  void flush(Connection& c) {
    while (c.out_pos < c.out.size()) {
      const ssize_t n =
          ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) close(c);  // the peer left
        return;
      }
      c.out_pos += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_pos = 0;
    if (c.out.capacity() > (std::size_t{1} << 20)) c.out.shrink_to_fit();
  }

  void reply(Connection& c, const std::vector<char>& bytes) {
    c.out.insert(c.out.end(), bytes.begin(), bytes.end());
    flush(c);
  }

  // Parses and answers the messages that have fully arrived; true if it consumed any.
  bool process(Connection& c) {
    bool progress = false;
    try {
      while (!c.closed && !c.waiting && c.out.empty() && !c.in.empty()) {
        Reader r(c.in);
        std::string presented;
        Request q;
        if (!(c.authenticated ? parse_request(r, q) : parse_handshake(r, presented))) {
          if (!r.error.empty()) drop(c, r.error);
          break;
        }
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(r.pos));
        if (c.in.capacity() > kMaxMessageBytes / 2) c.in.shrink_to_fit();
        progress = true;
        if (c.authenticated) {
          execute(c, q);
        } else if (!tokens_equal(presented, token)) {
          (void)::send(c.fd.get(), &kRejected, 1, MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort
          drop(c, "bad token");
        } else if (clients >= max_clients) {
          (void)::send(c.fd.get(), &kFull, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          drop(c, "all " + std::to_string(max_clients) + " client connections are in use");
        } else {
          --pending;
          ++clients;
          c.authenticated = true;
          reply(c, {kAccepted});
        }
      }
    } catch (const std::bad_alloc&) {
      drop(c, "out of memory for its request");
    }
    return progress;
  }

  void execute(Connection& c, Request& q) {
    std::vector<char> out{kOk};
    switch (q.op) {
      case kSet:
        data[q.keys[0]] = std::move(q.value);
        reply(c, out);
        return wake_waiters();
      case kGet:
      case kWait:
        c.waiting = true;
        c.wait_deadline = Clock::now() + clamp_timeout(milliseconds(static_cast<std::int64_t>(
                                             std::min<std::uint64_t>(q.number, INT64_MAX))));
        c.wait = std::move(q);
        return finish_wait(c, Clock::now());
      case kAdd: {
        std::int64_t value = 0;
        const std::string& key = q.keys[0];
        if (const auto it = data.find(key); it != data.end()) {
          const char* end = it->second.data() + it->second.size();
          const auto [ptr, ec] = std::from_chars(it->second.data(), end, value);
          if (ec != std::errc() || ptr != end)
            return error_reply(c, "value of key " + quote(key) + " is not an integer counter");
        }
        if (__builtin_add_overflow(value, static_cast<std::int64_t>(q.number), &value)) {
          return error_reply(c, "counter " + quote(key) + " would overflow");
        }
        const std::string text = std::to_string(value);
        data[key].assign(text.begin(), text.end());
        put_be(out, static_cast<std::uint64_t>(value), 8);
        reply(c, out);
        return wake_waiters();
      }
      case kCheck:
        out.push_back(all_present(q.keys) ? 1 : 0);
        return reply(c, out);
    }
  }

  void error_reply(Connection& c, const std::string& message) {
    std::vector<char> out{kError};
    put_key(out, message);
    reply(c, out);
  }

  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data.count(k) > 0; });
  }

  // Answers a waiting GET or WAIT once its keys exist, or TIMEOUT once its deadline has passed.
  void finish_wait(Connection& c, Clock::time_point now) {
    std::vector<char> out{kOk};
    if (all_present(c.wait.keys)) {
      if (c.wait.op == kGet) {
        const auto& value = data.at(c.wait.keys[0]);
        put_be(out, value.size(), 8);
        out.insert(out.end(), value.begin(), value.end());
      }
    } else if (now >= c.wait_deadline) {
      out[0] = kTimeout;
    } else {
      return;
    }
    c.waiting = false;
    c.wait = Request{};
    reply(c, out);
  }

  void wake_waiters() {
    const auto now = Clock::now();
    for (auto& c : conns) {
      if (!c->closed && c->waiting) finish_wait(*c, now);
    }
  }
};

StoreServer::StoreServer(int listen_fd, std::string token, milliseconds handshake_timeout,
                         std::size_t max_clients) {
  UniqueFd fd(listen_fd);  // owned from here on: closed on every failure path
  const std::string what = "store server: fd " + std::to_string(listen_fd);
  check_token(token, "store server");
  int accepting = 0;
  socklen_t len = sizeof accepting;
  if (::getsockopt(listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || accepting == 0) {
    throw DistError(what + " is not a listening socket");
  }
  sockaddr_storage addr{};
  len = sizeof addr;
  const int flags = ::fcntl(listen_fd, F_GETFL);
  if (flags < 0 || ::fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::fcntl(listen_fd, F_SETFD, FD_CLOEXEC) != 0 ||
      ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw DistError(errno_text((what + ": cannot set up the listening socket").c_str()));
  }
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) throw DistError(what + " is not a TCP socket");
  address_text(addr, len, &port_);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) throw DistError(errno_text("store server: pipe2"));
  impl_ = std::make_unique<Impl>();
  impl_->wake_read.reset(pipe_fds[0]);
  impl_->wake_write.reset(pipe_fds[1]);
  impl_->listen_fd.reset(fd.release());
  impl_->token = std::move(token);
  impl_->handshake_timeout = handshake_timeout;
  impl_->max_clients = max_clients;
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreServer::StoreServer(const std::string& address, int port, std::string token,
                         milliseconds handshake_timeout, std::size_t max_clients)
    : StoreServer(listen_socket(address, port), std::move(token), handshake_timeout, max_clients) {}

StoreServer::~StoreServer() {
  impl_->stop.store(true);
  const char wake = 1;
  while (::write(impl_->wake_write.get(), &wake, 1) < 0 && errno == EINTR) {
  }
  impl_->thread.join();
}

int StoreServer::listen_socket(const std::string& address, int port) {
  const std::string where = join_host_port(address, port);
  if (address.empty() || port < 0 || port > 65535) {
    throw DistError("store server: invalid listen address '" + where + "' (need a host and a port 0-65535)");
  }
  std::string error = "no addresses";
  bool unknown = false;
  const AddrInfoList list = resolve(address, port, error, &unknown);
  // The store's own host (MASTER_ADDR) must be known where it runs: a name or address that is not is
  // the job's mistake (exit 2); a lookup that failed for now (DNS) is a failure like any other.
  if (list == nullptr && unknown) throw LaunchConfigError("store server: cannot listen on " + where + ": " + error);
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    int one = 1;
    if (fd.get() < 0 || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      const int err = errno;
      error = std::strerror(err);
      if (err == EADDRINUSE) error += " (another job's store? give each job its own MASTER_PORT)";
      continue;
    }
    return fd.release();
  }
  throw DistError("store server: cannot listen on " + where + ": " + error);
}

}  // namespace ptrain::dist
