#include "engine/pipeline/checker.h"

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/pipeline/channels.h"
#include "engine/pipeline/pairs.h"

namespace ptrain::pipeline {
namespace {

constexpr int kOps = 7;
constexpr size_t kMaxProblems = 40;  // a broken schedule of 1000s of ops would bury the first cause

// Collects problems, keeping the first kMaxProblems and counting the rest.
class Problems {
 public:
  void add(std::string sentence) {
    if (kept_.size() < kMaxProblems) {
      kept_.push_back(std::move(sentence));
    } else {
      ++dropped_;
    }
  }
  bool empty() const { return kept_.empty(); }
  std::vector<std::string> finish() && {
    if (dropped_ > 0) kept_.push_back("... and " + std::to_string(dropped_) + " more problems");
    return std::move(kept_);
  }

 private:
  std::vector<std::string> kept_;
  size_t dropped_ = 0;
};

std::string at(int rank, int index, const Instr& instr) {
  return "rank " + std::to_string(rank) + ", instruction " + std::to_string(index) + " (" + to_string(instr) +
         ")";
}

// Instruction fields: ranges, peers, and ops that have no place at this end of the pipeline.
void check_fields(const Schedule& s, Problems& problems) {
  const config::StagePlacement place = s.placement();
  const int last_stage = s.virtual_stages() - 1;
  for (int rank = 0; rank < s.pp; ++rank) {
    for (int i = 0; i < static_cast<int>(s.ranks[rank].size()); ++i) {
      const Instr& instr = s.ranks[rank][i];
      auto where = [&] { return at(rank, i, instr); };  // built only for a problem
      if (instr.microbatch < 0 || instr.microbatch >= s.microbatches) {
        problems.add(where() + ": microbatch out of range [0, " + std::to_string(s.microbatches) + ")");
        continue;
      }
      if (instr.chunk < 0 || instr.chunk >= s.vpp) {
        problems.add(where() + ": chunk out of range [0, " + std::to_string(s.vpp) + ")");
        continue;
      }
      const int stage = place.virtual_stage(rank, instr.chunk);
      if (instr.overlapped && instr.op != Op::Forward)
        problems.add(where() + ": only an F opens an F&B pair (overlapped is set)");
      switch (instr.op) {
        case Op::Forward:
        case Op::Backward:
        case Op::WeightGrad:
          if (instr.peer != -1) problems.add(where() + ": a compute op has no peer (expected -1)");
          if (instr.op == Op::WeightGrad && !s.split_weight_grad) {
            problems.add(where() + ": this schedule runs the weight grad inside B, so it has no W");
          }
          break;
        case Op::SendAct:
        case Op::RecvGrad:
          if (stage == last_stage) {
            problems.add(where() + ": the last virtual stage has no " + to_string(instr.op));
          } else if (const int next = place.next_rank(rank, instr.chunk); next == rank) {
            problems.add(where() + ": the next virtual stage is on this rank, a hop without a message");
          } else if (instr.peer != next) {
            problems.add(where() + ": the next virtual stage is on rank " + std::to_string(next));
          }
          break;
        case Op::RecvAct:
        case Op::SendGrad:
          if (stage == 0) {
            problems.add(where() + ": the first virtual stage has no " + to_string(instr.op));
          } else if (const int prev = place.prev_rank(rank, instr.chunk); prev == rank) {
            problems.add(where() + ": the previous virtual stage is on this rank, a hop without a message");
          } else if (instr.peer != prev) {
            problems.add(where() + ": the previous virtual stage is on rank " + std::to_string(prev));
          }
          break;
      }
    }
  }
}

// Where each (op, microbatch, chunk) sits in one rank's list: -1 = absent, -2 = more than once.
class Positions {
 public:
  Positions(const Schedule& s, int rank)
      : s_(s), index_(static_cast<size_t>(kOps) * s.microbatches * s.vpp, -1) {
    const auto& list = s.ranks[rank];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      int& slot = index_[key(list[i].op, list[i].microbatch, list[i].chunk)];
      slot = slot == -1 ? i : -2;
    }
  }
  int of(Op op, int mb, int chunk) const { return index_[key(op, mb, chunk)]; }

 private:
  size_t key(Op op, int mb, int chunk) const {
    return (static_cast<size_t>(op) * s_.microbatches + mb) * s_.vpp + chunk;
  }
  const Schedule& s_;
  std::vector<int> index_;
};

// The neighbouring stages of (rank, chunk): their ranks, -1 at either end of the pipeline.
struct Neighbours {
  int prev = -1, next = -1;
  Neighbours(const config::StagePlacement& place, int rank, int chunk)
      : prev(place.first(rank, chunk) ? -1 : place.prev_rank(rank, chunk)),
        next(place.last(rank, chunk) ? -1 : place.next_rank(rank, chunk)) {}
};

// Whether (mb, chunk) on `rank` has the op at all: messages only to a neighbour on another rank.
bool stage_has(Op op, const Neighbours& around, int rank, bool split_weight_grad) {
  switch (op) {
    case Op::Forward:
    case Op::Backward:
      return true;
    case Op::WeightGrad:
      return split_weight_grad;
    case Op::SendAct:
    case Op::RecvGrad:
      return around.next >= 0 && around.next != rank;
    case Op::RecvAct:
    case Op::SendGrad:
      return around.prev >= 0 && around.prev != rank;
  }
  return false;
}

// A hop between two chunks of one rank has no message: F of the earlier chunk must come before F
// of the later one in the list, B of the later before B of the earlier.
void check_local_hop(const Schedule& s, const Positions& pos, int rank, int mb, int chunk,
                     Problems& problems) {
  const int later = s.placement().chunk_beside(rank, chunk, +1);
  if (later < 0) return;
  for (const auto& [op, first, second] :
       {std::tuple{Op::Forward, chunk, later}, std::tuple{Op::Backward, later, chunk}}) {
    const int a = pos.of(op, mb, first), b = pos.of(op, mb, second);
    if (a < 0 || b < 0 || a < b) continue;  // missing or repeated: reported on its own
    problems.add(at(rank, b, s.ranks[rank][b]) + " comes before " + to_string(op) + "(mb " +
                 std::to_string(mb) + ", chunk " + std::to_string(first) + ") at instruction " +
                 std::to_string(a) + ", which hands it its input on this rank");
  }
}

// Exactly the ops each (mb, chunk) needs on its rank, each once, in dependency order.
void check_ops_and_local_order(const Schedule& s, Problems& problems) {
  const config::StagePlacement place = s.placement();
  for (int rank = 0; rank < s.pp; ++rank) {
    const Positions pos(s, rank);
    const std::string on_rank = "rank " + std::to_string(rank) + ": ";
    for (int mb = 0; mb < s.microbatches; ++mb) {
      for (int chunk = 0; chunk < s.vpp; ++chunk) {
        const Neighbours around(place, rank, chunk);
        bool complete = true;
        for (int op = 0; op < kOps; ++op) {
          const Op kind = static_cast<Op>(op);
          const bool to_next = kind == Op::SendAct || kind == Op::RecvGrad;
          const Instr instr{kind, mb, chunk, is_compute(kind) ? -1 : to_next ? around.next : around.prev};
          const int p = pos.of(instr.op, mb, chunk);
          if (p == -2) {
            problems.add(on_rank + to_string(instr) + " appears more than once");
            complete = false;
          } else if (p == -1 && stage_has(kind, around, rank, s.split_weight_grad)) {
            problems.add(on_rank + to_string(instr) + " is missing");
            complete = false;
          }
        }
        if (!complete) continue;
        check_local_hop(s, pos, rank, mb, chunk, problems);
        // Each pair: the first must come before the second.
        const std::array<std::pair<Op, Op>, 6> before = {{{Op::RecvAct, Op::Forward},
                                                          {Op::Forward, Op::SendAct},
                                                          {Op::Forward, Op::Backward},
                                                          {Op::RecvGrad, Op::Backward},
                                                          {Op::Backward, Op::SendGrad},
                                                          {Op::Backward, Op::WeightGrad}}};
        for (const auto& [first, second] : before) {
          const int a = pos.of(first, mb, chunk), b = pos.of(second, mb, chunk);
          if (a < 0 || b < 0 || a < b) continue;  // an op this stage does not have
          problems.add(at(rank, b, s.ranks[rank][b]) + " comes before " + to_string(first) +
                       " of the same microbatch and chunk at instruction " + std::to_string(a));
        }
      }
    }
  }
}

// An F that opens an F&B pair needs a B as the rank's next compute op, to pair with.
void check_pairs(const Schedule& s, Problems& problems) {
  for (int rank = 0; rank < s.pp; ++rank) {
    const auto& list = s.ranks[rank];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      if (!list[i].overlapped) continue;
      int next = i + 1;
      while (next < static_cast<int>(list.size()) && !is_compute(list[next].op)) ++next;
      if (next < static_cast<int>(list.size()) && list[next].op == Op::Backward) continue;
      problems.add(at(rank, i, list[i]) + ": the rank's next compute op " +
                   (next < static_cast<int>(list.size()) ? "is " + to_string(list[next]) : "is missing") +
                   ", not a B to pair with");
    }
  }
}

struct Message {
  int microbatch;
  int sender_chunk;
  int rank;   // whose list holds the send or receive
  int index;  // its position there
};

// Both ends of every channel must list the same messages in the same order.
void check_channels(const Schedule& s, Problems& problems) {
  const detail::ChannelIndex index(s);
  std::vector<std::vector<Message>> sends(static_cast<std::size_t>(index.count())), recvs(sends.size());
  for (int rank = 0; rank < s.pp; ++rank) {
    for (int i = 0; i < static_cast<int>(s.ranks[rank].size()); ++i) {
      const Instr& instr = s.ranks[rank][i];
      if (is_send(instr.op)) {
        sends[index.of(instr, rank)].push_back({instr.microbatch, instr.chunk, rank, i});
      } else if (is_recv(instr.op)) {
        const int sender_stage = s.virtual_stage(rank, instr.chunk) + (instr.op == Op::RecvAct ? -1 : 1);
        recvs[index.of(instr, rank)].push_back(
            {instr.microbatch, s.placement().holder(sender_stage).chunk, rank, i});
      }
    }
  }
  for (int c = 0; c < index.count(); ++c) {
    const Channel& ch = index.channel(c);
    const std::string channel = "channel rank " + std::to_string(ch.from) + " -> rank " + std::to_string(ch.to) +
                                (ch.activations ? " (activations)" : " (gradients)");
    const auto& out = sends[c];
    const auto& in = recvs[c];
    if (out.size() != in.size()) {
      problems.add(channel + ": " + std::to_string(out.size()) + " sends but " + std::to_string(in.size()) +
                   " receives");
      continue;
    }
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k].microbatch == in[k].microbatch && out[k].sender_chunk == in[k].sender_chunk) continue;
      problems.add(channel + ": message " + std::to_string(k) + " is sent by " +
                   at(out[k].rank, out[k].index, s.ranks[out[k].rank][out[k].index]) + " but received by " +
                   at(in[k].rank, in[k].index, s.ranks[in[k].rank][in[k].index]) +
                   "; both ends must list the channel's messages in the same order");
      break;  // the rest of the channel is shifted by the same cause
    }
  }
}

// Runs every list with buffered sends and blocking receives, each F&B pair as one step (all its
// receives, then all its sends); reports where it gets stuck.
void check_execution(const Schedule& s, Problems& problems) {
  const detail::ChannelIndex index(s);
  std::vector<int> sent(static_cast<std::size_t>(index.count()), 0), received(sent.size(), 0);
  std::vector<size_t> next(s.pp, 0);
  std::vector<size_t> waiting(s.pp, 0);  // the receive a rank stopped at
  // Runs instructions [begin, end) of the rank's list if every receive among them has its message.
  auto run = [&](int rank, size_t begin, size_t end) {
    const auto& list = s.ranks[rank];
    // Receives so far of this step, by channel: a pair has a few.
    std::vector<std::pair<int, int>> wanted;
    for (size_t i = begin; i < end; ++i) {
      if (!is_recv(list[i].op)) continue;
      const int c = index.of(list[i], rank);
      auto it = std::find_if(wanted.begin(), wanted.end(), [c](const auto& w) { return w.first == c; });
      if (it == wanted.end()) it = wanted.insert(wanted.end(), {c, 0});
      if (sent[c] - received[c] == it->second++) {  // blocks until the sender gets there
        waiting[rank] = i;
        return false;
      }
    }
    for (size_t i = begin; i < end; ++i) {
      if (is_send(list[i].op)) ++sent[index.of(list[i], rank)];
      if (is_recv(list[i].op)) ++received[index.of(list[i], rank)];
    }
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < s.pp; ++rank) {
      const auto& list = s.ranks[rank];
      while (next[rank] < list.size()) {
        const auto pair = detail::pair_at(list, next[rank]);
        const size_t end = pair ? pair->end : next[rank] + 1;
        if (!run(rank, next[rank], end)) break;
        next[rank] = end;
        progress = true;
      }
    }
  }
  for (int rank = 0; rank < s.pp; ++rank) {
    if (next[rank] == s.ranks[rank].size()) continue;
    const int i = static_cast<int>(waiting[rank]);
    const Instr& blocked = s.ranks[rank][i];
    // Channels match (checked before), so the peer cannot have finished: it is blocked too.
    const int peer = blocked.peer;
    const int peer_at = static_cast<int>(waiting[peer]);
    const std::string cause = "rank " + std::to_string(peer) + " is itself blocked at instruction " +
                              std::to_string(peer_at) + " (" + to_string(s.ranks[peer][peer_at]) + ")";
    problems.add("deadlock: " + at(rank, i, blocked) + " waits forever" +
                 (waiting[rank] != next[rank] ? " (an F&B pair receives all its inputs before it starts)" : "") +
                 ": " + cause);
  }
}

}  // namespace

std::vector<std::string> check(const Schedule& s) {
  Problems problems;
  if (s.pp < 1 || s.vpp < 1 || s.microbatches < 1 || static_cast<int>(s.ranks.size()) != s.pp) {
    problems.add("malformed schedule: pp = " + std::to_string(s.pp) + ", vpp = " + std::to_string(s.vpp) +
                 ", microbatches = " + std::to_string(s.microbatches) + ", with " +
                 std::to_string(s.ranks.size()) + " instruction lists (expected one per pp rank)");
    return std::move(problems).finish();
  }
  check_fields(s, problems);
  if (!problems.empty()) return std::move(problems).finish();  // later checks index by these fields
  check_ops_and_local_order(s, problems);
  check_pairs(s, problems);
  check_channels(s, problems);
  if (!problems.empty()) return std::move(problems).finish();  // execution would only echo them
  check_execution(s, problems);
  return std::move(problems).finish();
}

}  // namespace ptrain::pipeline
