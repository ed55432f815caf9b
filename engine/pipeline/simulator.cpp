#include "engine/pipeline/simulator.h"

#include <algorithm>
#include <deque>

#include "engine/pipeline/channels.h"
#include "engine/pipeline/pairs.h"

namespace ptrain::pipeline {

OpCosts OpCosts::uniform(const Schedule& s, double forward, double backward, double weight_grad, double p2p) {
  const size_t stages = static_cast<size_t>(s.virtual_stages());
  return {std::vector<double>(stages, forward), std::vector<double>(stages, backward),
          std::vector<double>(stages, weight_grad), {}, p2p};
}

namespace {

double cost_of(const Schedule& s, const OpCosts& costs, int rank, const Instr& instr) {
  const size_t stage = static_cast<size_t>(s.virtual_stage(rank, instr.chunk));
  switch (instr.op) {
    case Op::Forward:
      return costs.forward.at(stage);
    case Op::Backward:
      return costs.backward.at(stage) + (s.split_weight_grad ? 0.0 : costs.weight_grad.at(stage));
    case Op::WeightGrad:
      return costs.weight_grad.at(stage);
    default:
      return 0.0;
  }
}

// in_pair[i]: list[i] belongs to an F&B pair.
std::vector<bool> pair_members(const std::vector<Instr>& list) {
  std::vector<bool> in_pair(list.size(), false);
  for (size_t i = 0; i < list.size();) {
    const auto pair = detail::pair_at(list, i);
    if (!pair) {
      ++i;
      continue;
    }
    for (size_t k = pair->begin; k < pair->end; ++k) in_pair[k] = true;
    i = pair->end;
  }
  return in_pair;
}

// Peak counts over one rank's compute order (each op ends before the next starts, so the order
// of ends is the list order), counted as the ops run.
struct PeakCounter {
  int inflight = 0, live = 0, peak_inflight = 0, peak_live = 0;
  void add(Op op, bool split_weight_grad) {
    if (op == Op::Forward) {
      ++inflight, ++live;
    } else if (op == Op::Backward) {
      --inflight;
      if (!split_weight_grad) --live;
    } else {
      --live;
    }
    peak_inflight = std::max(peak_inflight, inflight);
    peak_live = std::max(peak_live, live);
  }
};

}  // namespace

Bubble bubble_of(const std::vector<double>& busy, double makespan) {
  Bubble out;
  if (busy.empty()) return out;
  out.rank = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  out.seconds = std::max(0.0, makespan - busy[static_cast<std::size_t>(out.rank)]);
  out.fraction = makespan > 0 ? out.seconds / makespan : 0.0;
  return out;
}

void account_idle(SimResult& sim) {
  sim.idle_fraction.clear();
  for (const double busy : sim.busy) sim.idle_fraction.push_back(sim.makespan > 0 ? 1.0 - busy / sim.makespan : 0.0);
  sim.bubble = bubble_of(sim.busy, sim.makespan);
}

SimResult simulate(const Schedule& s, const OpCosts& costs, Timeline timeline, InstructionTimes* times) {
  SimResult result;
  if (times != nullptr) {
    times->clock.assign(static_cast<std::size_t>(s.pp), {});
    for (int rank = 0; rank < s.pp; ++rank) times->clock[rank].assign(s.ranks[rank].size(), 0.0);
    times->busy = times->clock;
  }
  result.busy.assign(s.pp, 0.0);
  result.peak_inflight.assign(s.pp, 0.0);
  result.peak_live.assign(s.pp, 0.0);
  result.timeline.resize(s.pp);

  result.pairs_as_one_op = !costs.forward_backward.empty();

  const bool keep = timeline == Timeline::Keep;
  if (keep)
    for (int rank = 0; rank < s.pp; ++rank)  // its compute ops, one span each
      result.timeline[static_cast<std::size_t>(rank)].reserve(static_cast<std::size_t>(
          std::count_if(s.ranks[static_cast<std::size_t>(rank)].begin(), s.ranks[static_cast<std::size_t>(rank)].end(),
                        [](const Instr& in) { return is_compute(in.op); })));
  std::vector<PeakCounter> peaks(static_cast<std::size_t>(s.pp));
  const detail::ChannelIndex channel(s);
  std::vector<std::deque<double>> in_transit(static_cast<std::size_t>(channel.count()));  // arrival times, FIFO
  std::vector<double> clock(s.pp, 0.0);                                     // when each rank is free
  std::vector<size_t> next(s.pp, 0);
  auto record = [&](int rank, size_t i) {
    if (times == nullptr) return;
    times->clock[rank][i] = clock[rank];  // a send's issue time too: it takes none
    times->busy[rank][i] = result.busy[rank];
  };
  std::vector<std::vector<bool>> in_pair(s.pp);  // for the spans only
  if (keep)
    for (int rank = 0; rank < s.pp; ++rank) in_pair[rank] = pair_members(s.ranks[rank]);

  // Runs one instruction; false, changing nothing, if it is a receive whose message was not sent yet.
  auto run_one = [&](int rank, size_t i) {
    const Instr& instr = s.ranks[rank][i];
    if (is_send(instr.op)) {
      in_transit[channel.of(instr, rank)].push_back(clock[rank] + costs.p2p_seconds);
    } else if (is_recv(instr.op)) {
      auto& queue = in_transit[channel.of(instr, rank)];
      if (queue.empty()) return false;
      clock[rank] = std::max(clock[rank], queue.front());
      queue.pop_front();
    } else {
      const double start = clock[rank];
      clock[rank] += cost_of(s, costs, rank, instr);
      if (keep)
        result.timeline[rank].push_back({instr.op, instr.microbatch, instr.chunk, start, clock[rank], in_pair[rank][i]});
      peaks[static_cast<std::size_t>(rank)].add(instr.op, s.split_weight_grad);
      result.busy[rank] += clock[rank] - start;
    }
    record(rank, i);
    return true;
  };
  // Runs an F&B pair as one op of costs.forward_backward: it starts when the rank is free and all its
  // messages have arrived, and its sends leave when it ends. False, changing nothing, if a message
  // is missing.
  auto run_pair = [&](int rank, const detail::PairExtent& pair) {
    const auto& list = s.ranks[rank];
    std::vector<int> wanted;  // the channel of each receive
    for (size_t i = pair.begin; i < pair.end; ++i)
      if (is_recv(list[i].op)) wanted.push_back(channel.of(list[i], rank));
    for (int c : wanted)
      if (in_transit[c].size() < static_cast<size_t>(std::count(wanted.begin(), wanted.end(), c))) return false;
    for (int c : wanted) {
      clock[rank] = std::max(clock[rank], in_transit[c].front());
      in_transit[c].pop_front();
    }
    const double seconds =
        costs.forward_backward.at(static_cast<size_t>(s.virtual_stage(rank, list[pair.forward].chunk)));
    double own = 0;  // the ops' own costs: each is drawn with its share of the pair
    int ops = 0;
    for (size_t i = pair.begin; i < pair.end; ++i)
      if (is_compute(list[i].op)) own += cost_of(s, costs, rank, list[i]), ++ops;
    const double start = clock[rank];
    for (size_t i = pair.begin; i < pair.end; ++i) {
      const Instr& instr = list[i];
      if (!is_compute(instr.op)) continue;
      const double from = clock[rank];
      clock[rank] += own > 0 ? seconds * cost_of(s, costs, rank, instr) / own : seconds / ops;
      if (keep) result.timeline[rank].push_back({instr.op, instr.microbatch, instr.chunk, from, clock[rank], true});
      peaks[static_cast<std::size_t>(rank)].add(instr.op, s.split_weight_grad);
    }
    clock[rank] = start + seconds;  // exactly, whatever the rounding of the shares
    if (keep) result.timeline[rank].back().end = clock[rank];
    result.busy[rank] += seconds;
    for (size_t i = pair.begin; i < pair.end; ++i) {
      if (is_send(list[i].op)) in_transit[channel.of(list[i], rank)].push_back(clock[rank] + costs.p2p_seconds);
      record(rank, i);
    }
    return true;
  };

  // Rank by rank, as far as each can go before a message it needs was sent: the times do not
  // depend on this visiting order, only on the dependencies.
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < s.pp; ++rank) {
      for (size_t& i = next[rank]; i < s.ranks[rank].size(); progress = true) {
        const auto pair = result.pairs_as_one_op ? detail::pair_at(s.ranks[rank], i) : std::nullopt;
        if (pair ? !run_pair(rank, *pair) : !run_one(rank, i)) break;  // a message not sent yet
        i = pair ? pair->end : i + 1;
      }
    }
  }

  result.makespan = *std::max_element(clock.begin(), clock.end());
  account_idle(result);
  for (int rank = 0; rank < s.pp; ++rank) {
    const PeakCounter& counted = peaks[static_cast<std::size_t>(rank)];
    result.peak_inflight[rank] = static_cast<double>(counted.peak_inflight) / s.vpp;
    result.peak_live[rank] = static_cast<double>(counted.peak_live) / s.vpp;
  }
  result.peak_inflight_max = *std::max_element(result.peak_inflight.begin(), result.peak_inflight.end());
  result.peak_live_max = *std::max_element(result.peak_live.begin(), result.peak_live.end());
  return result;
}

}  // namespace ptrain::pipeline
