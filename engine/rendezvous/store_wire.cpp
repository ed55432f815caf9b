#include "engine/rendezvous/store_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "engine/launch/dist_error.h"

namespace ptrain::dist::wire {

std::string join_host_port(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}
std::string quote(const std::string& key) {
  return "'" + (key.size() > 100 ? key.substr(0, 100) + "..." : key) + "'";
}
std::string ms_text(milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}
milliseconds clamp_timeout(milliseconds ms) {
  return std::clamp(ms, milliseconds(0), kMaxTimeout);
}
std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

AddrInfoList resolve(const std::string& host, int port, std::string& error, bool* unknown) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = std::string("cannot resolve ") + join_host_port(host, port) + ": " + ::gai_strerror(rc);
    if (unknown != nullptr) {
      *unknown = rc == EAI_NONAME || rc == EAI_FAIL;
#ifdef EAI_NODATA
      *unknown = *unknown || rc == EAI_NODATA;
#endif
    }
  }
  return AddrInfoList(found, ::freeaddrinfo);
}

void put_be(std::vector<char>& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_key(std::vector<char>& out, const std::string& key) {
  put_be(out, key.size(), 4);
  out.insert(out.end(), key.begin(), key.end());
}
std::uint64_t get_be(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string transfer(int fd, char* data, std::size_t size, bool out, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t n =
        out ? ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
      deadline = std::max(deadline, Clock::now() + kStallTimeout);
      continue;
    }
    if (n == 0 || errno == ECONNRESET || errno == EPIPE) return "closed the connection";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_text("connection failed");
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return "did not answer in time";
    pollfd p{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
  }
  return "";
}

void check_token(const std::string& token, const char* who) {
  if (token.empty() || token.size() > kStoreMaxKeyBytes) {
    throw DistError(std::string(who) + ": the job token must be 1 to 4096 bytes, got " +
                    std::to_string(token.size()));
  }
}

}  // namespace ptrain::dist::wire
