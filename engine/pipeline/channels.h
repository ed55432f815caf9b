// Internal to engine/pipeline: the message channels of a schedule. A channel is (sender,
// receiver, payload); messages on one channel are matched in FIFO order (schedule.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/pipeline/schedule.h"

namespace ptrain::pipeline::detail {

inline bool carries_activation(Op op) {
  return op == Op::SendAct || op == Op::RecvAct;
}

// The channels a schedule's sends and receives name, numbered 0..count()-1 in the order of sender,
// receiver, then payload (activations first). A rank talks to a few peers, so a schedule uses O(pp)
// of the 2 pp^2 possible channels: tables by channel are sized count(), not by every pair of ranks
// (at pp 4096 those took gigabytes).
class ChannelIndex {
 public:
  explicit ChannelIndex(const Schedule& s);
  int count() const { return static_cast<int>(channels_.size()); }
  // The channel of a send or receive in rank `self`'s list.
  int of(const Instr& instr, int self) const;
  const Channel& channel(int id) const { return channels_[static_cast<std::size_t>(id)]; }

 private:
  struct Entry {  // a channel of one rank's list: its end here, the peer, the payload, and its number
    bool sends;
    int peer;
    bool activations;
    int id;
  };
  std::vector<std::vector<Entry>> by_rank_;  // a few per rank
  std::vector<Channel> channels_;
};

}  // namespace ptrain::pipeline::detail
