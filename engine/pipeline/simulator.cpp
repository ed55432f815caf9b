#include "engine/pipeline/simulator.h"

#include <algorithm>
#include <deque>

#include "engine/pipeline/channels.h"

namespace ptrain::pipeline {

OpCosts OpCosts::uniform(const Schedule& s, double forward, double backward, double weight_grad, double p2p) {
  const size_t stages = static_cast<size_t>(s.virtual_stages());
  return {std::vector<double>(stages, forward), std::vector<double>(stages, backward),
          std::vector<double>(stages, weight_grad), p2p};
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

// Peak counts over one rank's compute order (each op ends before the next starts, so the order
// of ends is the list order).
void count_peaks(const Schedule& s, int rank, SimResult& result) {
  int inflight = 0, live = 0, peak_inflight = 0, peak_live = 0;
  for (const Span& span : result.timeline[rank]) {
    if (span.op == Op::Forward) {
      ++inflight, ++live;
    } else if (span.op == Op::Backward) {
      --inflight;
      if (!s.split_weight_grad) --live;
    } else {
      --live;
    }
    peak_inflight = std::max(peak_inflight, inflight);
    peak_live = std::max(peak_live, live);
  }
  result.peak_inflight[rank] = static_cast<double>(peak_inflight) / s.vpp;
  result.peak_live[rank] = static_cast<double>(peak_live) / s.vpp;
}

}  // namespace

SimResult simulate(const Schedule& s, const OpCosts& costs) {
  SimResult result;
  result.busy.assign(s.pp, 0.0);
  result.bubble_fraction.assign(s.pp, 0.0);
  result.peak_inflight.assign(s.pp, 0.0);
  result.peak_live.assign(s.pp, 0.0);
  result.timeline.resize(s.pp);

  std::vector<std::deque<double>> in_transit(detail::channel_count(s.pp));  // arrival times, FIFO
  std::vector<double> clock(s.pp, 0.0);                                     // when each rank is free
  std::vector<size_t> next(s.pp, 0);
  // Rank by rank, as far as each can go before a message it needs was sent: the times do not
  // depend on this visiting order, only on the dependencies.
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < s.pp; ++rank) {
      const auto& list = s.ranks[rank];
      for (; next[rank] < list.size(); ++next[rank], progress = true) {
        const Instr& instr = list[next[rank]];
        if (is_send(instr.op)) {
          in_transit[detail::channel_of(instr, rank, s.pp)].push_back(clock[rank] + costs.p2p_seconds);
        } else if (is_recv(instr.op)) {
          auto& queue = in_transit[detail::channel_of(instr, rank, s.pp)];
          if (queue.empty()) break;  // not sent yet
          clock[rank] = std::max(clock[rank], queue.front());
          queue.pop_front();
        } else {
          const double start = clock[rank];
          clock[rank] += cost_of(s, costs, rank, instr);
          result.timeline[rank].push_back({instr.op, instr.microbatch, instr.chunk, start, clock[rank]});
          result.busy[rank] += clock[rank] - start;
        }
      }
    }
  }

  result.makespan = *std::max_element(clock.begin(), clock.end());
  for (int rank = 0; rank < s.pp; ++rank) {
    result.bubble_fraction[rank] = result.makespan > 0 ? 1.0 - result.busy[rank] / result.makespan : 0.0;
    count_peaks(s, rank, result);
  }
  result.bubble_fraction_max =
      *std::max_element(result.bubble_fraction.begin(), result.bubble_fraction.end());
  result.peak_inflight_max = *std::max_element(result.peak_inflight.begin(), result.peak_inflight.end());
  result.peak_live_max = *std::max_element(result.peak_live.begin(), result.peak_live.end());
  return result;
}

}  // namespace ptrain::pipeline
