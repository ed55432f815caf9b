#include "engine/pipeline/buffers.h"

#include <algorithm>

#include "engine/pipeline/channels.h"

namespace ptrain::pipeline {
namespace {

std::size_t at(int i) {
  return static_cast<std::size_t>(i);
}

}  // namespace

// A chunk's slot opens at its F, or, across a hop within the rank, at the earlier chunk's F, which
// fills it at once (ScheduleExecutor::run); it closes when the microbatch's gradients are written.
SlotCounts slot_counts(const Schedule& s, int rank) {
  const config::StagePlacement place = s.placement();
  const Op frees = s.split_weight_grad ? Op::WeightGrad : Op::Backward;
  std::vector<int> open(at(s.vpp), 0);
  SlotCounts counts{std::vector<int>(at(s.vpp), 0), 0};
  int open_together = 0;
  auto open_slot = [&](int chunk) {
    counts.per_chunk[at(chunk)] = std::max(counts.per_chunk[at(chunk)], ++open[at(chunk)]);
    counts.together = std::max(counts.together, ++open_together);
  };
  for (const Instr& in : s.ranks[at(rank)]) {
    if (in.op == Op::Forward && place.chunk_beside(rank, in.chunk, -1) < 0) open_slot(in.chunk);
    if (in.op == Op::Forward && place.chunk_beside(rank, in.chunk, +1) >= 0)
      open_slot(place.chunk_beside(rank, in.chunk, +1));
    if (in.op == frees) {
      --open[at(in.chunk)];
      --open_together;
    }
  }
  return counts;
}

std::vector<RankBuffers> rank_buffers(const Schedule& s) {
  const int pp = s.pp;
  // partner[r][i]: the index, in the peer's list, of the instruction that matches message i of
  // rank r (the n-th send on a channel meets the n-th receive on it).
  std::vector<std::vector<int>> partner(at(pp));
  {
    const detail::ChannelIndex index(s);
    std::vector<std::vector<int>> sends(at(index.count())), recvs(at(index.count()));
    for (int r = 0; r < pp; ++r) {
      const std::vector<Instr>& list = s.ranks[at(r)];
      partner[at(r)].assign(list.size(), -1);
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        if (is_send(list[at(i)].op)) sends[at(index.of(list[at(i)], r))].push_back(i);
        if (is_recv(list[at(i)].op)) recvs[at(index.of(list[at(i)], r))].push_back(i);
      }
    }
    for (int r = 0; r < pp; ++r) {
      const std::vector<Instr>& list = s.ranks[at(r)];
      std::vector<int> seen(at(index.count()), 0);
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        const Instr& in = list[at(i)];
        if (!is_send(in.op) && !is_recv(in.op)) continue;
        const int channel = index.of(in, r);
        const int n = seen[at(channel)]++;
        partner[at(r)][at(i)] = (is_send(in.op) ? recvs : sends)[at(channel)][at(n)];
      }
    }
  }

  // Run the lists in an order the contract allows (a receive once its send has run) with vector
  // clocks: known[r][q] is the last index of q's list that rank r knows q has run, learnt through
  // the chain of messages that reached r. A send from r to p is over once known[r][p] reaches p's
  // matching receive.
  std::vector<RankBuffers> out(at(pp));
  std::vector<std::vector<int>> known(at(pp), std::vector<int>(at(pp), -1));
  std::vector<std::vector<std::vector<int>>> known_at_send(
      at(pp));                                    // [rank][index]: known[rank] when it sent, until received
  std::vector<std::vector<int>> pending(at(pp));  // sends not yet known over
  std::vector<int> next(at(pp), 0);
  for (int r = 0; r < pp; ++r) {
    const std::vector<Instr>& list = s.ranks[at(r)];
    const SlotCounts slots = slot_counts(s, r);
    out[at(r)].activation_slots = slots.per_chunk;
    out[at(r)].shared_slots = s.max_in_flight != 0 ? slots.together : 0;
    out[at(r)].split_weight_grad = s.split_weight_grad;
    out[at(r)].send_released_after.assign(list.size(), -1);
    known_at_send[at(r)].resize(list.size());
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const std::vector<Instr>& list = s.ranks[at(r)];
      std::vector<int>& released = out[at(r)].send_released_after;
      for (int& i = next[at(r)]; i < static_cast<int>(list.size()); ++i) {
        const Instr& in = list[at(i)];
        if (is_recv(in.op)) {
          const int sent_at = partner[at(r)][at(i)];
          if (next[at(in.peer)] <= sent_at) break;  // its send has not run yet
          // Read once, by this receive: freed here, the clocks held are only those of messages in
          // flight (a clock per send of the step would be pp^2 x microbatches integers).
          std::vector<int> theirs = std::move(known_at_send[at(in.peer)][at(sent_at)]);
          for (int q = 0; q < pp; ++q) known[at(r)][at(q)] = std::max(known[at(r)][at(q)], theirs[at(q)]);
        }
        known[at(r)][at(r)] = i;
        if (is_send(in.op)) {
          known_at_send[at(r)][at(i)] = known[at(r)];
          pending[at(r)].push_back(i);
        }
        if (is_recv(in.op)) {
          std::vector<int>& mine = pending[at(r)];
          mine.erase(std::remove_if(mine.begin(), mine.end(),
                                    [&](int send) {
                                      const int peer = list[at(send)].peer;
                                      if (known[at(r)][at(peer)] < partner[at(r)][at(send)]) return false;
                                      released[at(send)] = i;
                                      return true;
                                    }),
                     mine.end());
        }
        progress = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r) {
    const int size = static_cast<int>(s.ranks[at(r)].size());
    std::vector<int>& released = out[at(r)].send_released_after;
    for (int send : pending[at(r)]) released[at(send)] = size;  // waited for at the end of the step
    // Live when send i is issued: the sends up to i not released before i.
    std::vector<int> released_after_index(at(size) + 1, 0);
    for (int k = 0; k < size; ++k)
      if (released[at(k)] >= 0) ++released_after_index[at(released[at(k)])];
    int live = 0;
    for (int k = 0; k < size; ++k) {
      if (k > 0) live -= released_after_index[at(k - 1)];
      if (is_send(s.ranks[at(r)][at(k)].op))
        out[at(r)].send_buffers = std::max(out[at(r)].send_buffers, ++live);
    }
  }
  return out;
}

}  // namespace ptrain::pipeline
