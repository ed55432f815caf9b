#include "engine/pipeline/channels.h"

#include <algorithm>

namespace ptrain::pipeline::detail {

std::int64_t ChannelIndex::key(const Instr& instr, int self) const {
  const std::int64_t from = is_send(instr.op) ? self : instr.peer, to = is_send(instr.op) ? instr.peer : self;
  return (from * pp_ + to) * 2 + (carries_activation(instr.op) ? 0 : 1);
}

ChannelIndex::ChannelIndex(const Schedule& s) : pp_(s.pp) {
  std::vector<std::int64_t> keys;
  for (int r = 0; r < s.pp; ++r)
    for (const Instr& in : s.ranks[static_cast<std::size_t>(r)])
      if (is_send(in.op) || is_recv(in.op)) keys.push_back(key(in, r));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  id_.reserve(keys.size());
  for (const std::int64_t k : keys) {
    id_.emplace(k, count());
    channels_.push_back({static_cast<int>(k / 2 / pp_), static_cast<int>(k / 2 % pp_), k % 2 == 0});
  }
}

int ChannelIndex::of(const Instr& instr, int self) const {
  return id_.at(key(instr, self));
}

}  // namespace ptrain::pipeline::detail
