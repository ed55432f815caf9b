#include "engine/comm/gloo_comm.h"

#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

#include "kernels/bf16.h"

namespace ptrain::dist {
namespace {

// Gloo's rendezvous reads and writes through our token-checked store.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(StoreClient& client, std::chrono::milliseconds timeout) : client_(client), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { client_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return client_.get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { client_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    client_.wait(keys, timeout);
  }

 private:
  StoreClient& client_;
  std::chrono::milliseconds timeout_;
};

// c = op(a, b) over bfloat16 elements, computed in fp32 and rounded to nearest even once, as NCCL's
// bf16 reductions do at each step. `c` may alias `a` or `b`.
template <typename Op>
void bf16_combine(void* c, const void* a, const void* b, std::size_t n, Op op) {
  auto* out = static_cast<std::uint16_t*>(c);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = kernels::f32_to_bf16(op(kernels::bf16_to_f32(x[i]), kernels::bf16_to_f32(y[i])));
}

template <typename T, typename Op>
void combine_as(void* dst, const void* src, std::size_t n, Op op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (std::size_t k = 0; k < n; ++k) d[k] = op(d[k], s[k]);
}

template <typename Op>
void combine_with(ElemType type, void* dst, const void* src, std::size_t n, Op op) {
  switch (type) {
    case ElemType::F32: return combine_as<float>(dst, src, n, op);
    case ElemType::F64: return combine_as<double>(dst, src, n, op);
    case ElemType::I64: return combine_as<std::int64_t>(dst, src, n, op);
    case ElemType::BF16: return bf16_combine(dst, dst, src, n, op);
  }
}

// dst = op(dst, src), one step of a ring reduction.
void combine(ElemType type, ReduceOp op, void* dst, const void* src, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum: return combine_with(type, dst, src, n, [](auto x, auto y) { return x + y; });
    case ReduceOp::Max: return combine_with(type, dst, src, n, [](auto x, auto y) { return std::max(x, y); });
    case ReduceOp::Min: return combine_with(type, dst, src, n, [](auto x, auto y) { return std::min(x, y); });
  }
}

class GlooComm final : public Comm {
 public:
  GlooComm(StoreClient& store, int rank, int world, const GlooOptions& options)
      : Comm(rank, world), store_(store, options.timeout), timeout_(options.timeout) {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.address;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    if (world > 1) connect(world_group());
  }

  const char* backend() const override { return "gloo"; }

 protected:
  // Gloo connects the members of a group only: a non-member has nothing to do.
  void connect(const Group& g) override {
    if (!g.has_me()) return;
    auto context = std::make_shared<gloo::rendezvous::Context>(g.index, g.size());
    context->setTimeout(timeout_);
    gloo::rendezvous::PrefixStore prefix("gloo/" + std::to_string(g.id), store_);
    context->connectFullMesh(prefix, device_);
    contexts_[g.id] = std::move(context);
  }

  // Host memory, complete on return: nothing to overlap. The all-reduce is ring() both ways
  // rather than gloo::allreduce: on a host whose ranks share cores, Gloo's algorithm often waited
  // a scheduler tick (4 ms) per small call where the ring takes 0.1-0.2 ms.
  void do_all_reduce(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op,
                     bool) override {
    ring(g, data, count, type, op, true, true);
  }

  void do_reduce_scatter(const Group& g, void* data, std::size_t chunk, ElemType type, bool) override {
    ring(g, data, chunk * static_cast<std::size_t>(g.size()), type, ReduceOp::Sum, true, false);
  }

  // Only bytes move, so every element type is the same here.
  void do_all_gather(const Group& g, void* data, std::size_t chunk, ElemType type, bool) override {
    ring(g, data, chunk * static_cast<std::size_t>(g.size()), type, ReduceOp::Sum, false, true);
  }

  void do_all_to_allv(const Group& g, const float* in, const std::vector<std::size_t>& send_counts, float* out,
                      const std::vector<std::size_t>& recv_counts) override {
    gloo::AlltoallvOptions opts(context(g));
    opts.setTimeout(timeout_);
    opts.setTag(next_tag(g));
    opts.setInput(const_cast<float*>(in), std::vector<std::int64_t>(send_counts.begin(), send_counts.end()));
    opts.setOutput(out, std::vector<std::int64_t>(recv_counts.begin(), recv_counts.end()));
    gloo::alltoallv(opts);
  }

  void do_broadcast(const Group& g, void* data, std::size_t bytes, int root) override {
    gloo::BroadcastOptions opts(context(g));
    opts.setTimeout(timeout_);
    opts.setTag(next_tag(g));
    opts.setOutput(static_cast<char*>(data), bytes);
    opts.setRoot(root);
    gloo::broadcast(opts);
  }

  // Point-to-point messages between two ranks are matched in order: the n-th send from a to b
  // meets the n-th recv on b from a.
  void do_send(const Group& g, const void* data, std::size_t bytes, int peer, int channel) override {
    do_isend(g, data, bytes, peer, channel)();
  }

  bool sends_in_flight() const override { return true; }

  // Gloo's TCP transport sends once the receiver has posted the matching recv, so a send must be
  // left in flight for two ranks that send to each other before they receive (the pipeline).
  std::function<void()> do_isend(const Group& g, const void* data, std::size_t bytes, int peer,
                                 int channel) override {
    std::shared_ptr<gloo::transport::UnboundBuffer> buf =
        context(g)->createUnboundBuffer(const_cast<void*>(data), bytes);
    buf->send(peer, p2p_slot(g, g.index, peer, channel));
    return [buf, timeout = timeout_] { buf->waitSend(timeout); };
  }

  void do_recv(const Group& g, void* data, std::size_t bytes, int peer, int channel) override {
    auto buf = context(g)->createUnboundBuffer(data, bytes);
    buf->recv(peer, p2p_slot(g, peer, g.index, channel));
    buf->waitRecv(timeout_);
  }

  void do_barrier(const Group& g) override {
    gloo::BarrierOptions opts(context(g));
    opts.setTimeout(timeout_);
    opts.setTag(next_tag(g));
    gloo::barrier(opts);
  }

 private:
  // The ring over `count` elements of `data` in place, chunk c being elements [c*count/n,
  // (c+1)*count/n). `reduce`: n-1 steps at which rank i sends chunk (i-s-1) to its right neighbour
  // and combines chunk (i-s-2) from its left one, after which chunk i holds the full result.
  // `gather`: n-1 steps at which rank i forwards chunk (i-s) and receives chunk (i-s-1), after which
  // every rank holds every chunk, the bytes of the rank that finished it, so all agree exactly.
  void ring(const Group& g, void* data, std::size_t count, ElemType type, ReduceOp op, bool reduce, bool gather) {
    const int n = g.size(), i = g.index, right = (i + 1) % n, left = (i + n - 1) % n;
    if (n == 1 || count == 0) return;
    const auto& ctx = context(g);
    const std::size_t size = elem_size(type), widest = count / static_cast<std::size_t>(n) + 1;
    auto first = [&](int c) { return count * static_cast<std::size_t>(c) / static_cast<std::size_t>(n); };
    auto length = [&](int c) { return first(c + 1) - first(c); };
    auto wrap = [n](int c) { return (c % n + n) % n; };
    const auto incoming = std::make_unique<char[]>(reduce ? widest * size : 1);
    auto buf = ctx->createUnboundBuffer(data, count * size);
    auto in = ctx->createUnboundBuffer(incoming.get(), reduce ? widest * size : 1);
    const std::uint64_t base = next_slot_base(g);
    const int steps = (reduce ? n - 1 : 0) + (gather ? n - 1 : 0);
    for (int s = 0; s < steps; ++s) {
      const bool reducing = reduce && s < n - 1;
      const int t = reduce && !reducing ? s - (n - 1) : s;  // the step within its phase
      const int send_chunk = wrap(reducing ? i - t - 1 : i - t), recv_chunk = wrap(reducing ? i - t - 2 : i - t - 1);
      const std::uint64_t slot = base + static_cast<std::uint64_t>(s);
      if (length(send_chunk) > 0) buf->send(right, slot, first(send_chunk) * size, length(send_chunk) * size);
      if (length(recv_chunk) > 0) {
        if (reducing) {
          in->recv(left, slot, 0, length(recv_chunk) * size);
          in->waitRecv(timeout_);
          combine(type, op, static_cast<char*>(data) + first(recv_chunk) * size, incoming.get(), length(recv_chunk));
        } else {
          buf->recv(left, slot, first(recv_chunk) * size, length(recv_chunk) * size);
          buf->waitRecv(timeout_);
        }
      }
      if (length(send_chunk) > 0) buf->waitSend(timeout_);
    }
  }
  const std::shared_ptr<gloo::Context>& context(const Group& g) const { return contexts_.at(g.id); }
  // Collectives of one group run in the same order on every member, so a per-group counter
  // names them alike everywhere.
  std::uint32_t next_tag(const Group& g) { return tags_[g.id]++; }
  // Our slots live under top bytes Gloo's algorithms do not use (theirs are small prefixes):
  // 0xF0 for the rings (2^16 steps per operation), 0xF1 for point-to-point messages (the channel in
  // the next byte).
  std::uint64_t next_slot_base(const Group& g) {
    return (0xF0ull << 56) | ((ring_ops_[g.id]++ % (1ull << 40)) << 16);
  }
  std::uint64_t p2p_slot(const Group& g, int from, int to, int channel) {
    return (0xF1ull << 56) | (static_cast<std::uint64_t>(channel) << 48) |
           (p2p_counts_[std::make_tuple(g.id, from, to, channel)]++ % (1ull << 48));
  }

  StoreAdapter store_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::map<int, std::shared_ptr<gloo::Context>> contexts_;
  std::map<int, std::uint32_t> tags_;
  std::map<int, std::uint64_t> ring_ops_;
  std::map<std::tuple<int, int, int, int>, std::uint64_t> p2p_counts_;
};

}  // namespace

std::unique_ptr<Comm> make_gloo_comm(StoreClient& store, int rank, int world, const GlooOptions& options) {
  try {
    return std::make_unique<GlooComm>(store, rank, world, options);
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(rank) + ": connecting to the other " + std::to_string(world - 1) +
                    " ranks through Gloo failed: " + e.what());
  }
}

}  // namespace ptrain::dist
