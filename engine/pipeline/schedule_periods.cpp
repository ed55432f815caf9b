#include "engine/pipeline/schedule_periods.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/pipeline/pairs.h"

namespace ptrain::pipeline::detail {
namespace {

using std::size_t;

// "The same shift" on every component of a state, relative to the times: the rounding of sums of
// many costs, far below any difference a schedule's costs make.
constexpr double kSameShift = 1e-9;
// Tries at settling the cuts before and after a block a block apart (each moves them back).
constexpr int kSettleTries = 16;

bool renumbered(const Instr& later, const Instr& earlier, int k) {
  Instr shifted = earlier;
  shifted.microbatch += k;
  return later == shifted;
}

// Where `longer` is `shorter` with instructions inserted at one place and those after them
// renumbered k microbatches later: the places that can be, [first, last].
struct Places {
  size_t first = 0, last = 0;
};
std::optional<Places> insertion_places(const std::vector<Instr>& shorter, const std::vector<Instr>& longer, int k) {
  if (longer.size() < shorter.size()) return std::nullopt;
  size_t common = 0;
  while (common < shorter.size() && shorter[common] == longer[common]) ++common;
  size_t tail = 0;  // instructions both end with, renumbered
  while (tail < shorter.size() &&
         renumbered(longer[longer.size() - 1 - tail], shorter[shorter.size() - 1 - tail], k))
    ++tail;
  if (shorter.size() - tail > common) return std::nullopt;
  return Places{shorter.size() - tail, common};
}

// Moves the cut back, as little as it takes, until it is clean; false if a rank's cut would go below
// lowest[r].
bool settle_cut(const Schedule& s, const ChannelIndex& channel, std::vector<size_t>& cut,
                const std::vector<size_t>& lowest) {
  for (bool moved = true; moved;) {
    moved = false;
    std::vector<std::int64_t> sent(static_cast<size_t>(channel.count()), 0);
    for (int r = 0; r < s.pp; ++r) {
      const std::vector<Instr>& list = s.ranks[static_cast<size_t>(r)];
      size_t& at = cut[static_cast<size_t>(r)];
      for (size_t i = 0; i < list.size() && i < at;) {
        const auto pair = pair_at(list, i);
        const size_t end = pair ? pair->end : i + 1;
        if (at < end) at = i, moved = true;
        i = end;
      }
      for (size_t i = 0; i < at; ++i)
        if (is_send(list[i].op)) ++sent[static_cast<size_t>(channel.of(list[i], r))];
    }
    std::vector<std::int64_t> received(sent.size(), 0);
    for (int r = 0; r < s.pp; ++r) {
      const std::vector<Instr>& list = s.ranks[static_cast<size_t>(r)];
      size_t& at = cut[static_cast<size_t>(r)];
      for (size_t i = 0; i < at; ++i) {
        if (!is_recv(list[i].op)) continue;
        const auto c = static_cast<size_t>(channel.of(list[i], r));
        if (++received[c] > sent[c]) at = i, moved = true;  // its send is past the sender's cut
      }
    }
    for (size_t r = 0; r < cut.size(); ++r)
      if (cut[r] < lowest[r]) return false;
  }
  return true;
}

// Whether each chunk has as many F, B (and W) in [begin, end) of the list: a block leaves as many
// microbatches in flight, and slots open, as it found.
bool balanced(const Schedule& s, const std::vector<Instr>& list, size_t begin, size_t end) {
  std::vector<std::int64_t> forwards(static_cast<size_t>(s.vpp), 0), backwards(forwards), weight_grads(forwards);
  for (size_t i = begin; i < end; ++i) {
    const auto c = static_cast<size_t>(list[i].chunk);
    if (list[i].op == Op::Forward) ++forwards[c];
    if (list[i].op == Op::Backward) ++backwards[c];
    if (list[i].op == Op::WeightGrad) ++weight_grads[c];
  }
  return forwards == backwards && (!s.split_weight_grad || forwards == weight_grads);
}

}  // namespace

std::vector<size_t> Periods::cut(int j) const {
  std::vector<size_t> at = first_block;
  for (size_t r = 0; r < at.size(); ++r) at[r] += static_cast<size_t>(j) * block[r];
  return at;
}

std::optional<Periods> find_periods(const Schedule& at0, const Schedule& at1, const Schedule& at2, int k) {
  const auto pp = static_cast<size_t>(at0.pp);
  // In at2's lists: where its second block may begin.
  Periods periods{at0.microbatches, k, {}, {}};
  std::vector<size_t> lowest, highest;
  for (size_t r = 0; r < pp; ++r) {
    const std::optional<Places> first = insertion_places(at0.ranks[r], at1.ranks[r], k);
    const std::optional<Places> second = insertion_places(at1.ranks[r], at2.ranks[r], k);
    const size_t block = at1.ranks[r].size() - at0.ranks[r].size();
    if (!first || !second || at2.ranks[r].size() - at1.ranks[r].size() != block) return std::nullopt;
    periods.block.push_back(block);
    lowest.push_back(std::max(second->first, first->first + block));
    highest.push_back(std::min(second->last, first->last + block));
    if (lowest[r] > highest[r]) return std::nullopt;
  }
  // The latest clean cuts before and after that block, a block apart.
  const ChannelIndex channel(at2);
  std::vector<size_t> begin = highest, end, lowest_end;
  for (size_t r = 0; r < pp; ++r) lowest_end.push_back(lowest[r] + periods.block[r]);
  for (int tries = 0;; ++tries) {
    if (tries == kSettleTries || !settle_cut(at2, channel, begin, lowest)) return std::nullopt;
    end.clear();
    for (size_t r = 0; r < pp; ++r) end.push_back(begin[r] + periods.block[r]);
    const std::vector<size_t> wanted_end = end;
    if (!settle_cut(at2, channel, end, lowest_end)) return std::nullopt;
    if (end == wanted_end) break;
    for (size_t r = 0; r < pp; ++r) begin[r] = end[r] - periods.block[r];
  }
  for (size_t r = 0; r < pp; ++r) {
    const size_t block = periods.block[r];
    periods.first_block.push_back(begin[r] - block);
    for (size_t i = 0; i < block; ++i)
      if (!renumbered(at2.ranks[r][begin[r] + i], at1.ranks[r][begin[r] - block + i], k)) return std::nullopt;
    if (!balanced(at2, at2.ranks[r], begin[r], begin[r] + block)) return std::nullopt;
  }
  return periods;
}

bool repeats(const Schedule& longer, const Schedule& one_block, const Periods& periods) {
  const int blocks = (longer.microbatches - periods.m0) / periods.k;
  for (size_t r = 0; r < periods.block.size(); ++r) {
    const std::vector<Instr>&to = longer.ranks[r], &from = one_block.ranks[r];
    const size_t blocks_end = periods.first_block[r] + static_cast<size_t>(blocks) * periods.block[r];
    const size_t first_end = periods.first_block[r] + periods.block[r];
    if (to.size() != from.size() + static_cast<size_t>(blocks - 1) * periods.block[r]) return false;
    // The prefix and the first block as they are, each further block the one before renumbered,
    // and the tail renumbered with the last block.
    if (!std::equal(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(first_end), to.begin())) return false;
    for (size_t i = first_end; i < blocks_end; ++i)
      if (!renumbered(to[i], to[i - periods.block[r]], periods.k)) return false;
    for (size_t i = blocks_end; i < to.size(); ++i)
      if (!renumbered(to[i], from[i - (blocks_end - first_end)], (blocks - 1) * periods.k)) return false;
  }
  return true;
}

std::vector<std::optional<Cut>> clean_cuts(const Schedule& s, const ChannelIndex& channel,
                                           const std::vector<std::vector<size_t>>& cuts) {
  const auto channels = static_cast<size_t>(channel.count());
  // Per channel: its sends in order (the sender's list order: FIFO), as (rank, index).
  std::vector<std::vector<std::pair<int, size_t>>> sends(channels);
  // Per cut: the sends and receives before it on each channel, and whether it splits an F&B pair.
  std::vector<std::vector<size_t>> sent(cuts.size(), std::vector<size_t>(channels, 0)), received(sent);
  std::vector<bool> splits(cuts.size(), false);
  for (int r = 0; r < s.pp; ++r) {
    const std::vector<Instr>& list = s.ranks[static_cast<size_t>(r)];
    std::vector<size_t> order(cuts.size());  // the cuts by their place in this list
    for (size_t j = 0; j < order.size(); ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cuts[a][static_cast<size_t>(r)] < cuts[b][static_cast<size_t>(r)]; });
    std::vector<size_t> sent_here(channels, 0), received_here(channels, 0);
    size_t next = 0;  // into order
    auto note_cuts_at = [&](size_t i) {  // the cuts up to index i, a boundary between instructions or pairs
      for (; next < order.size() && cuts[order[next]][static_cast<size_t>(r)] <= i; ++next) {
        const size_t j = order[next], at = cuts[j][static_cast<size_t>(r)];
        if (at < i) splits[j] = true;  // inside the pair that began before it
        for (size_t c = 0; c < channels; ++c) {
          if (channel.channel(static_cast<int>(c)).from == r) sent[j][c] = sent_here[c];
          if (channel.channel(static_cast<int>(c)).to == r) received[j][c] = received_here[c];
        }
      }
    };
    for (size_t i = 0; i < list.size();) {
      note_cuts_at(i);
      const auto pair = pair_at(list, i);
      const size_t end = pair ? pair->end : i + 1;
      for (size_t k = i; k < end; ++k) {
        const Instr& in = list[k];
        if (!is_send(in.op) && !is_recv(in.op)) continue;
        const auto c = static_cast<size_t>(channel.of(in, r));
        if (is_send(in.op)) sends[c].emplace_back(r, k), ++sent_here[c];
        if (is_recv(in.op)) ++received_here[c];
      }
      i = end;
    }
    note_cuts_at(list.size());
  }
  std::vector<std::optional<Cut>> out;
  for (size_t j = 0; j < cuts.size(); ++j) {
    bool clean = !splits[j];
    for (size_t c = 0; c < channels && clean; ++c) clean = received[j][c] <= sent[j][c];
    if (!clean) {
      out.emplace_back();
      continue;
    }
    Cut cut{cuts[j], std::vector<std::vector<std::pair<int, size_t>>>(channels)};
    for (size_t c = 0; c < channels; ++c)
      cut.crossing[c].assign(sends[c].begin() + static_cast<std::ptrdiff_t>(received[j][c]),
                             sends[c].begin() + static_cast<std::ptrdiff_t>(sent[j][c]));
    out.push_back(std::move(cut));
  }
  return out;
}

CutState state_at(const Cut& cut, const InstructionTimes& times) {
  CutState state;
  for (size_t r = 0; r < cut.at.size(); ++r) state.clocks.push_back(cut.at[r] > 0 ? times.clock[r][cut.at[r] - 1] : 0.0);
  for (const auto& sends : cut.crossing) {
    state.in_flight.emplace_back();
    for (const auto& [r, i] : sends) state.in_flight.back().push_back(times.clock[static_cast<size_t>(r)][i]);
  }
  return state;
}

bool same_shift(double before, double after, double shift) {
  return std::abs(after - before - shift) <= kSameShift * std::max(std::abs(after), std::abs(before));
}

bool later_by_one_shift(const CutState& before, const CutState& after) {
  const double shift = after.clocks.front() - before.clocks.front();
  for (size_t r = 0; r < before.clocks.size(); ++r)
    if (!same_shift(before.clocks[r], after.clocks[r], shift)) return false;
  for (size_t c = 0; c < before.in_flight.size(); ++c) {
    if (before.in_flight[c].size() != after.in_flight[c].size()) return false;
    for (size_t i = 0; i < before.in_flight[c].size(); ++i)
      if (!same_shift(before.in_flight[c][i], after.in_flight[c][i], shift)) return false;
  }
  return true;
}

}  // namespace ptrain::pipeline::detail
