#include "engine/pipeline/buffers.h"

#include <algorithm>

#include "engine/pipeline/channels.h"

namespace ptrain::pipeline {
namespace {

std::size_t at(int i) {
  return static_cast<std::size_t>(i);
}

std::vector<int> activation_slots(const Schedule& s, const std::vector<Instr>& list) {
  const Op frees = s.split_weight_grad ? Op::WeightGrad : Op::Backward;
  std::vector<int> open(at(s.vpp), 0), most(at(s.vpp), 0);
  for (const Instr& in : list) {
    int& n = open[at(in.chunk)];
    if (in.op == Op::Forward) most[at(in.chunk)] = std::max(most[at(in.chunk)], ++n);
    if (in.op == frees) --n;
  }
  return most;
}

}  // namespace

std::vector<RankBuffers> rank_buffers(const Schedule& s) {
  const int pp = s.pp;
  // partner[r][i]: the index, in the peer's list, of the instruction that matches message i of
  // rank r (the n-th send on a channel meets the n-th receive on it).
  std::vector<std::vector<int>> partner(at(pp));
  {
    std::vector<std::vector<int>> sends(at(detail::channel_count(pp))), recvs(at(detail::channel_count(pp)));
    for (int r = 0; r < pp; ++r) {
      const std::vector<Instr>& list = s.ranks[at(r)];
      partner[at(r)].assign(list.size(), -1);
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        if (is_send(list[at(i)].op)) sends[at(detail::channel_of(list[at(i)], r, pp))].push_back(i);
        if (is_recv(list[at(i)].op)) recvs[at(detail::channel_of(list[at(i)], r, pp))].push_back(i);
      }
    }
    for (int r = 0; r < pp; ++r) {
      const std::vector<Instr>& list = s.ranks[at(r)];
      std::vector<int> seen(at(detail::channel_count(pp)), 0);
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        const Instr& in = list[at(i)];
        if (!is_send(in.op) && !is_recv(in.op)) continue;
        const int channel = detail::channel_of(in, r, pp);
        const int n = seen[at(channel)]++;
        partner[at(r)][at(i)] = (is_send(in.op) ? recvs : sends)[at(channel)][at(n)];
      }
    }
  }

  std::vector<RankBuffers> out(at(pp));
  for (int r = 0; r < pp; ++r) {
    const std::vector<Instr>& list = s.ranks[at(r)];
    const int size = static_cast<int>(list.size());
    out[at(r)].activation_slots = activation_slots(s, list);
    std::vector<int>& released = out[at(r)].send_released_after;
    released.assign(list.size(), -1);
    for (int i = 0; i < size; ++i) {
      if (!is_send(list[at(i)].op)) continue;
      const int peer = list[at(i)].peer, received_at = partner[at(r)][at(i)];
      released[at(i)] = size;
      for (int j = i + 1; j < size; ++j) {
        if (is_recv(list[at(j)].op) && list[at(j)].peer == peer && partner[at(r)][at(j)] > received_at) {
          released[at(i)] = j;
          break;
        }
      }
    }
    // Live when send i is issued: the sends up to i not released before i.
    for (int i = 0; i < size; ++i) {
      if (!is_send(list[at(i)].op)) continue;
      int live = 0;
      for (int j = 0; j <= i; ++j)
        if (released[at(j)] >= i) ++live;
      out[at(r)].send_buffers = std::max(out[at(r)].send_buffers, live);
    }
  }
  return out;
}

}  // namespace ptrain::pipeline
