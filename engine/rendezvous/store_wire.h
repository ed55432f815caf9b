// The rendezvous store's wire format (see the protocol comment in store.h) and the socket helpers
// that StoreServer (store.cpp) and StoreClient (store_client.cpp) share. Internal to engine/rendezvous.
#pragma once

#include <netdb.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/launch/unique_fd.h"
#include "engine/rendezvous/store.h"

namespace ptrain::dist::wire {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr char kMagic[4] = {'P', 'T', 'R', 'S'};
inline constexpr char kVersion = 1, kAccepted = 0, kRejected = 1, kFull = 2;  // handshake replies
enum Op : char { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5 };
enum Status : char { kOk = 0, kTimeout = 1, kError = 2 };
// The largest well-formed message (a SET at both caps); a peer buffering more is dropped.
inline constexpr std::size_t kMaxMessageBytes = kStoreMaxValueBytes + kStoreMaxKeyBytes + 64;
inline constexpr milliseconds kMaxTimeout = std::chrono::hours(24 * 365);
// Client side: how long the server may stall while it owes us bytes before we give up on it.
inline constexpr milliseconds kStallTimeout = std::chrono::seconds(60);

using dist::UniqueFd;

std::string join_host_port(const std::string& host, int port);
// A key for an error message: quoted, and cut short when long.
std::string quote(const std::string& key);
std::string ms_text(milliseconds ms);
milliseconds clamp_timeout(milliseconds ms);
// "<what>: <strerror(errno)>".
std::string errno_text(const char* what);

using AddrInfoList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
// The TCP addresses of host:port; empty, with `error` set, when it does not resolve; `unknown` (when
// given) then says whether the name is unknown (EAI_NONAME, EAI_NODATA, EAI_FAIL) rather than
// unresolved for now (a DNS server that did not answer, no memory).
AddrInfoList resolve(const std::string& host, int port, std::string& error, bool* unknown = nullptr);

// Big-endian integers, and a key as u32 length | bytes.
void put_be(std::vector<char>& out, std::uint64_t v, int bytes);
void put_key(std::vector<char>& out, const std::string& key);
std::uint64_t get_be(const char* p, int bytes);

// Moves `size` bytes over a non-blocking socket (sends when `out`), giving up at `deadline`, which
// each moved byte pushes out to at least kStallTimeout ahead. Returns "" or what went wrong.
std::string transfer(int fd, char* data, std::size_t size, bool out, Clock::time_point deadline);

// Throws DistError (naming `who`) unless the job token is 1 to kStoreMaxKeyBytes bytes.
void check_token(const std::string& token, const char* who);

}  // namespace ptrain::dist::wire
