#include "engine/pipeline/channels.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>

namespace ptrain::pipeline::detail {
namespace {

bool before(const Channel& a, const Channel& b) {  // sender, receiver, then activations first
  return std::tuple(a.from, a.to, !a.activations) < std::tuple(b.from, b.to, !b.activations);
}

}  // namespace

ChannelIndex::ChannelIndex(const Schedule& s) : by_rank_(static_cast<std::size_t>(s.pp)) {
  // Each rank's few channels, found by a scan of its short list of them.
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Entry>& mine = by_rank_[static_cast<std::size_t>(r)];
    for (const Instr& in : s.ranks[static_cast<std::size_t>(r)]) {
      if (!is_send(in.op) && !is_recv(in.op)) continue;
      const Entry entry{is_send(in.op), in.peer, carries_activation(in.op), -1};
      const bool known = std::any_of(mine.begin(), mine.end(), [&](const Entry& e) {
        return e.sends == entry.sends && e.peer == entry.peer && e.activations == entry.activations;
      });
      if (!known) {
        mine.push_back(entry);
        channels_.push_back({entry.sends ? r : in.peer, entry.sends ? in.peer : r, entry.activations});
      }
    }
  }
  // A channel is in the lists of both its ends: once each, in order.
  std::sort(channels_.begin(), channels_.end(), before);
  channels_.erase(std::unique(channels_.begin(), channels_.end()), channels_.end());
  for (int r = 0; r < s.pp; ++r)
    for (Entry& e : by_rank_[static_cast<std::size_t>(r)]) {
      const Channel c{e.sends ? r : e.peer, e.sends ? e.peer : r, e.activations};
      e.id = static_cast<int>(std::lower_bound(channels_.begin(), channels_.end(), c, before) - channels_.begin());
    }
}

int ChannelIndex::of(const Instr& instr, int self) const {
  const bool sends = is_send(instr.op), activations = carries_activation(instr.op);
  for (const Entry& e : by_rank_[static_cast<std::size_t>(self)])
    if (e.sends == sends && e.peer == instr.peer && e.activations == activations) return e.id;
  throw std::out_of_range("ChannelIndex: the instruction is not in the schedule it indexes");
}

}  // namespace ptrain::pipeline::detail
