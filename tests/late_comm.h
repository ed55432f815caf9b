// Test support: a dist::Comm wrapper that completes overlapped collectives as late as a device's
// comm stream may, so that CPU tests can check that the engine joins every overlapped collective
// before it touches the collective's data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/comm/comm.h"

namespace ptrain::test {

// A Comm that completes overlapped collectives late, as a device's comm stream may: at issue it keeps
// a copy of the data and fills the caller's buffer with NaN; at join(ticket), or before a later
// collective that is waited for (a stream runs them in order), it checks that the buffer was left
// alone, runs the collective on the copy through the real Comm and writes the result back. So ZeRO passes
// with it only if it never reads or writes what a collective works on before joining it.
class LateComm final : public dist::Comm {
 public:
  explicit LateComm(dist::Comm& inner) : Comm(inner.rank(), inner.world()), inner_(&inner) {}

  const char* backend() const override { return "late"; }
  bool takes_device_memory() const override { return true; }
  void join(Ticket ticket) override { complete(ticket); }
  std::size_t in_flight() const { return late_.size(); }
  int overlapped = 0;          // collectives issued to overlap
  int overlapped_gathers = 0;  // of which all-gathers

 protected:
  void connect(const dist::Group& g) override { inner_groups_[g.id] = &inner_->new_group(g.name, g.ranks); }
  void do_all_reduce(const dist::Group& g, void* data, std::size_t count, dist::ElemType type,
                     dist::ReduceOp op, bool overlap) override {
    run(data, count * dist::elem_size(type), type, overlap,
        [=, this](void* p) { inner_->all_reduce(inner(g), p, count, type, op); });
  }
  void do_reduce_scatter(const dist::Group& g, void* data, std::size_t chunk, dist::ElemType type,
                         bool overlap) override {
    run(data, chunk * dist::elem_size(type) * static_cast<std::size_t>(g.size()), type, overlap,
        [=, this](void* p) { inner_->reduce_scatter(inner(g), p, chunk, type); });
  }
  void do_all_gather(const dist::Group& g, void* data, std::size_t chunk, dist::ElemType type,
                     bool overlap) override {
    overlapped_gathers += overlap ? 1 : 0;
    run(data, chunk * dist::elem_size(type) * static_cast<std::size_t>(g.size()), type, overlap,
        [=, this](void* p) { inner_->all_gather(inner(g), p, chunk, type); });
  }
  void do_all_to_allv(const dist::Group& g, const float* in, const std::vector<std::size_t>& send_counts,
                      float* out, const std::vector<std::size_t>& recv_counts) override {
    complete_all();
    inner_->all_to_allv(inner(g), in, send_counts, out, recv_counts);
  }
  void do_broadcast(const dist::Group& g, void* data, std::size_t bytes, int root) override {
    complete_all();
    inner_->broadcast(inner(g), data, bytes, root);
  }
  void do_send(const dist::Group& g, const void* data, std::size_t bytes, int peer, int channel) override {
    complete_all();
    inner_->send(inner(g), data, bytes, peer, channel);
  }
  void do_recv(const dist::Group& g, void* data, std::size_t bytes, int peer, int channel) override {
    complete_all();
    inner_->recv(inner(g), data, bytes, peer, channel);
  }
  void do_barrier(const dist::Group& g) override {
    complete_all();
    inner_->barrier(inner(g));
  }

 private:
  struct Late {
    std::uint64_t seq;
    void* data;
    std::vector<std::byte> copy, poison;
    std::function<void(void*)> collective;
  };

  const dist::Group& inner(const dist::Group& g) const {
    return g.id == 0 ? inner_->world_group() : *inner_groups_.at(g.id);
  }

  static std::vector<std::byte> poison_for(std::size_t bytes, dist::ElemType type) {
    std::vector<std::byte> p(bytes, std::byte{0xff});
    if (type == dist::ElemType::F32) {
      for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(p.data() + i, &nan, 4);
      }
    }
    if (type == dist::ElemType::BF16) {
      for (std::size_t i = 0; i + 2 <= bytes; i += 2) {
        const std::uint16_t nan = 0x7fc0;
        std::memcpy(p.data() + i, &nan, 2);
      }
    }
    return p;
  }

  // An overlapped collective leaves the ones before it in flight: only join, or a collective that
  // is waited for, completes them.
  void run(void* data, std::size_t bytes, dist::ElemType type, bool overlap,
           std::function<void(void*)> collective) {
    if (!overlap) {
      complete_all();
      return collective(data);
    }
    overlapped += 1;
    Late late{defer_completion().seq, data, std::vector<std::byte>(bytes), poison_for(bytes, type),
              std::move(collective)};
    std::memcpy(late.copy.data(), data, bytes);
    std::memcpy(data, late.poison.data(), bytes);
    late_.push_back(std::move(late));
  }

  void complete(Ticket upto) {
    while (!late_.empty() && late_.front().seq <= upto) {
      Late late = std::move(late_.front());
      late_.pop_front();
      if (std::memcmp(late.data, late.poison.data(), late.poison.size()) != 0)
        throw dist::DistError("collective #" + std::to_string(late.seq) +
                              ": its buffer was written before join");
      late.collective(late.copy.data());
      std::memcpy(late.data, late.copy.data(), late.copy.size());
      finished(late.seq);
    }
  }
  void complete_all() { complete(std::numeric_limits<Ticket>::max()); }

  dist::Comm* inner_;
  std::map<int, const dist::Group*> inner_groups_;
  std::deque<Late> late_;
};

}  // namespace ptrain::test
