#include "engine/comm/comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <set>
#include <utility>

#include "engine/comm/heartbeat.h"

namespace ptrain::dist {

std::size_t elem_size(ElemType type) {
  switch (type) {
    case ElemType::BF16: return 2;
    case ElemType::F32: return 4;
    case ElemType::F64:
    case ElemType::I64: return 8;
  }
  return 0;
}

std::uint64_t CollectiveLog::begin(const char* op, const Group& group, std::size_t bytes, int peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.size() == kCapacity) entries_.pop_front();
  entries_.push_back({next_seq_, op, group.id, ++group_calls_[group.id], group.name, bytes, peer,
                      std::chrono::steady_clock::now(), -1});
  return next_seq_++;
}

std::optional<CollectivePosition> CollectiveLog::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty()) return std::nullopt;
  const Entry& e = entries_.back();
  return CollectivePosition{e.seq, e.op, e.group_id, e.group, e.group_call, e.peer, e.seconds < 0};
}

void CollectiveLog::end(std::uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->seq != seq) continue;
    it->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->start).count();
    return;
  }
}

std::string CollectiveLog::dump() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty()) return "  (no collective yet)\n";
  std::string out;
  const auto now = std::chrono::steady_clock::now();
  for (const Entry& e : entries_) {
    char line[256];
    const bool in_flight = e.seconds < 0;
    const double secs = in_flight ? std::chrono::duration<double>(now - e.start).count() : e.seconds;
    std::snprintf(line, sizeof line, "  #%llu %-14s %-24s %12zu bytes%s  %s %.3f s\n",
                  static_cast<unsigned long long>(e.seq), e.op, e.group.c_str(), e.bytes,
                  e.peer >= 0 ? (" peer " + std::to_string(e.peer)).c_str() : "",
                  in_flight ? "IN FLIGHT for" : "took", secs);
    out += line;
  }
  return out;
}

bool CollectiveLog::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.seconds < 0; });
}

Comm::Comm(int rank, int world) : rank_(rank), world_(world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw DistError("Comm: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  auto g = std::make_unique<Group>();
  g->id = 0;
  g->name = "world";
  for (int r = 0; r < world; ++r) g->ranks.push_back(r);
  g->index = rank;
  groups_.push_back(std::move(g));
}

Comm::~Comm() = default;

const Group& Comm::new_group(const std::string& name, const std::vector<int>& ranks) {
  if (ranks.empty()) throw DistError("group " + name + " has no ranks");
  std::set<int> seen;
  for (int r : ranks)
    if (r < 0 || r >= world_ || !seen.insert(r).second)
      throw DistError("group " + name + ": rank " + std::to_string(r) + " is out of range or repeated");
  auto g = std::make_unique<Group>();
  g->id = static_cast<int>(groups_.size());
  g->name = name;
  g->ranks = ranks;
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  g->index = it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
  // (The world group, made by this constructor, is connected by the backend's constructor.)
  if (g->size() > 1) logged("connect", *g, 0, -1, [&] { connect(*g); });
  groups_.push_back(std::move(g));
  return *groups_.back();
}

void Comm::check_member(const Group& g, const char* op) const {
  if (!g.has_me())
    throw DistError(std::string(op) + " on group " + g.name + ": rank " + std::to_string(rank_) + " is not a member");
}

std::string Comm::name(const Running& r) const {
  return std::string(r.op) + " #" + std::to_string(r.seq) + " on group " + r.group->name + " (" +
         std::to_string(r.bytes) + " bytes)";
}

template <typename Fn>
void Comm::logged(const char* op, const Group& g, std::size_t bytes, int peer, Fn&& fn) {
  running_ = {log_.begin(op, g, bytes, peer), op, &g, bytes, peer, false};
  Traffic& t = traffic_[g.id][op];
  t.calls += 1;
  t.bytes += static_cast<double>(bytes);
  const auto start = std::chrono::steady_clock::now();
  try {
    fn();
  } catch (const std::exception& e) {
    std::string what = "rank " + std::to_string(rank_) + ": " + name(running_) + " failed: " + e.what();
    if (failure_verdict_) what = lead_with_verdict(failure_verdict_(), what);
    throw CollectiveError(what, log_.dump());
  }
  const auto end = std::chrono::steady_clock::now();
  t.seconds += std::chrono::duration<double>(end - start).count();
  if (trace_ != nullptr) {
    std::string args = trace_args(g, bytes, peer);
    if (running_.deferred) args += ", \"left_in_flight\": true";  // the span is its issue
    trace_->add(op, "collective", Trace::kCollectives, start, end, args);
  }
  if (!running_.deferred) log_.end(running_.seq);
}

std::string Comm::trace_args(const Group& g, std::size_t bytes, int peer) const {
  std::string args = "\"group\": \"" + g.name + "\", \"bytes\": " + std::to_string(bytes);
  if (peer >= 0) args += ", \"peer\": " + std::to_string(peer);
  return args;
}

std::uint64_t Comm::trace_mark(const void* stream) const {
  return trace_ != nullptr ? trace_->mark(stream) : 0;
}

void Comm::trace_device(std::uint64_t from, std::uint64_t to, int track) {
  if (trace_ == nullptr) return;
  trace_->add_device(running_.op, "collective", from, to, trace_args(*running_.group, running_.bytes, running_.peer),
                     track);
}

const std::map<std::string, Comm::Traffic>& Comm::traffic(const Group& g) const {
  static const std::map<std::string, Traffic> none;
  const auto it = traffic_.find(g.id);
  return it == traffic_.end() ? none : it->second;
}

Comm::Deferred Comm::defer_completion() {
  running_.deferred = true;
  return {running_.seq, name(running_)};
}

void Comm::hand_out_ticket(Ticket* overlap) const {
  if (overlap != nullptr) *overlap = running_.deferred ? running_.seq : 0;
}

void Comm::all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op,
                      Ticket* overlap) {
  if (overlap != nullptr) *overlap = 0;
  check_member(g, "all_reduce");
  if (g.size() == 1 || count == 0) return;
  logged("all_reduce", g, count * elem_size(type), -1,
         [&] { do_all_reduce(g, data, count, type, op, overlap != nullptr); });
  hand_out_ticket(overlap);
}

void Comm::reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type, Ticket* overlap) {
  if (overlap != nullptr) *overlap = 0;
  check_member(g, "reduce_scatter");
  if (g.size() == 1 || chunk == 0) return;
  logged("reduce_scatter", g, chunk * elem_size(type) * static_cast<std::size_t>(g.size()), -1,
         [&] { do_reduce_scatter(g, data, chunk, type, overlap != nullptr); });
  hand_out_ticket(overlap);
}

void Comm::all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, Ticket* overlap) {
  if (overlap != nullptr) *overlap = 0;
  check_member(g, "all_gather");
  if (g.size() == 1 || chunk == 0) return;
  logged("all_gather", g, chunk * elem_size(type) * static_cast<std::size_t>(g.size()), -1,
         [&] { do_all_gather(g, data, chunk, type, overlap != nullptr); });
  hand_out_ticket(overlap);
}

void Comm::all_to_all(const Group& g, const float* in, float* out, std::size_t chunk) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(g.size()), chunk);
  all_to_allv(g, in, counts, out, counts);
}

void Comm::all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                       const std::vector<std::size_t>& recv_counts) {
  check_member(g, "all_to_allv");
  const auto n = static_cast<std::size_t>(g.size());
  if (send_counts.size() != n || recv_counts.size() != n)
    throw DistError("all_to_allv on group " + g.name + ": need one count per rank");
  if (n == 1) {
    if (send_counts[0] != recv_counts[0]) throw DistError("all_to_allv on a one-rank group: counts differ");
    std::memmove(out, in, send_counts[0] * sizeof(float));
    return;
  }
  std::size_t bytes = 0;
  for (std::size_t c : send_counts) bytes += c * sizeof(float);
  logged("all_to_allv", g, bytes, -1, [&] { do_all_to_allv(g, in, send_counts, out, recv_counts); });
}

void Comm::broadcast(const Group& g, void* data, std::size_t bytes, int root) {
  check_member(g, "broadcast");
  if (root < 0 || root >= g.size()) throw DistError("broadcast on group " + g.name + ": bad root");
  if (g.size() == 1 || bytes == 0) return;
  logged("broadcast", g, bytes, root, [&] { do_broadcast(g, data, bytes, root); });
}

void Comm::check_peer(const Group& g, const char* op, int peer, int channel) const {
  check_member(g, op);
  if (peer < 0 || peer >= g.size() || peer == g.index || channel < 0 || channel > 255)
    throw DistError(std::string(op) + " on group " + g.name + ": bad peer or channel");
}

void Comm::send(const Group& g, const void* data, std::size_t bytes, int peer, int channel) {
  check_peer(g, "send", peer, channel);
  logged("send", g, bytes, peer, [&] { do_send(g, data, bytes, peer, channel); });
}

void Comm::recv(const Group& g, void* data, std::size_t bytes, int peer, int channel) {
  check_peer(g, "recv", peer, channel);
  logged("recv", g, bytes, peer, [&] { do_recv(g, data, bytes, peer, channel); });
}

std::function<void()> Comm::do_isend(const Group& g, const void* data, std::size_t bytes, int peer, int channel) {
  do_send(g, data, bytes, peer, channel);
  return {};
}

Comm::SendHandle Comm::isend(const Group& g, const void* data, std::size_t bytes, int peer, int channel) {
  check_peer(g, "isend", peer, channel);
  SendHandle handle;
  logged("isend", g, bytes, peer, [&] {
    handle.wait_ = do_isend(g, data, bytes, peer, channel);
    if (!handle.wait_) return;
    const Deferred d = defer_completion();
    handle.comm_ = this;
    handle.seq_ = d.seq;
    handle.name_ = d.name;
  });
  return handle;
}

void Comm::SendHandle::wait() {
  if (!wait_) return;
  const std::function<void()> wait = std::move(wait_);
  wait_ = nullptr;
  try {
    wait();
  } catch (const std::exception& e) {
    comm_->finished(seq_);
    throw CollectiveError("rank " + std::to_string(comm_->rank()) + ": " + name_ + " failed: " + e.what(),
                          comm_->log().dump());
  }
  comm_->finished(seq_);
}

Comm::SendHandle::SendHandle(SendHandle&& other) noexcept
    : comm_(other.comm_),
      seq_(other.seq_),
      name_(std::move(other.name_)),
      wait_(std::exchange(other.wait_, nullptr)) {}

Comm::SendHandle& Comm::SendHandle::operator=(SendHandle&& other) noexcept {
  if (this != &other) {
    try {
      wait();
    } catch (const std::exception&) {  // the documented contract: call wait() to see errors
    }
    comm_ = other.comm_;
    seq_ = other.seq_;
    name_ = std::move(other.name_);
    wait_ = std::exchange(other.wait_, nullptr);
  }
  return *this;
}

Comm::SendHandle::~SendHandle() {
  if (std::uncaught_exceptions() > 0) {
    if (wait_) comm_->abandon_in_flight();
    return;
  }
  try {
    wait();
  } catch (const std::exception&) {  // see operator=
  }
}

void Comm::open_channels(const Group& g, const std::vector<Channel>& channels, std::size_t message_bytes) {
  check_member(g, "open_channels");
  for (const Channel& c : channels) {
    const bool in_group = c.from >= 0 && c.from < g.size() && c.to >= 0 && c.to < g.size();
    if (!in_group || c.from == c.to || c.channel < 0 || c.channel > 255)
      throw DistError("open_channels on group " + g.name + ": bad channel " + std::to_string(c.channel) +
                      " from " + std::to_string(c.from) + " to " + std::to_string(c.to));
    if (c.from != g.index && c.to != g.index) continue;
    logged("open_channel", g, message_bytes, c.from == g.index ? c.to : c.from,
           [&] { do_open_channel(g, c, message_bytes); });
  }
}

void Comm::barrier(const Group& g) {
  check_member(g, "barrier");
  if (g.size() == 1) return;
  logged("barrier", g, 0, -1, [&] { do_barrier(g); });
}

void Comm::broadcast_string(const Group& g, std::string& text, int root) {
  std::int64_t size = static_cast<std::int64_t>(text.size());
  broadcast(g, &size, sizeof size, root);
  text.resize(static_cast<std::size_t>(size));
  broadcast(g, text.data(), text.size(), root);
}

std::vector<std::string> Comm::gather_strings(const Group& g, const std::string& mine, int root) {
  check_member(g, "gather_strings");
  if (g.index != root) {
    const auto size = static_cast<std::int64_t>(mine.size());
    send(g, &size, sizeof size, root);
    if (size > 0) send(g, mine.data(), mine.size(), root);
    return {};
  }
  std::vector<std::string> all(static_cast<std::size_t>(g.size()));
  for (int peer = 0; peer < g.size(); ++peer) {
    std::string& text = all[static_cast<std::size_t>(peer)];
    if (peer == root) {
      text = mine;
      continue;
    }
    std::int64_t size = 0;
    recv(g, &size, sizeof size, peer);
    if (size < 0 || size > (std::int64_t{1} << 30)) throw DistError("gather_strings: bad size from rank " + std::to_string(peer));
    text.resize(static_cast<std::size_t>(size));
    if (size > 0) recv(g, text.data(), text.size(), peer);
  }
  return all;
}

namespace {

class SoloComm final : public Comm {
 public:
  SoloComm() : Comm(0, 1) {}
  const char* backend() const override { return "solo"; }

 protected:
  // Every group of a one-rank world has one member, which the base class handles.
  [[noreturn]] static void unreachable() { throw DistError("solo comm: a multi-rank collective"); }
  void connect(const Group&) override { unreachable(); }
  void do_all_reduce(const Group&, void*, std::size_t, ElemType, ReduceOp, bool) override { unreachable(); }
  void do_reduce_scatter(const Group&, void*, std::size_t, ElemType, bool) override { unreachable(); }
  void do_all_gather(const Group&, void*, std::size_t, ElemType, bool) override { unreachable(); }
  void do_all_to_allv(const Group&, const float*, const std::vector<std::size_t>&, float*,
                      const std::vector<std::size_t>&) override {
    unreachable();
  }
  void do_broadcast(const Group&, void*, std::size_t, int) override { unreachable(); }
  void do_send(const Group&, const void*, std::size_t, int, int) override { unreachable(); }
  void do_recv(const Group&, void*, std::size_t, int, int) override { unreachable(); }
  void do_barrier(const Group&) override { unreachable(); }
};

}  // namespace

std::unique_ptr<Comm> make_solo_comm() { return std::make_unique<SoloComm>(); }

}  // namespace ptrain::dist
