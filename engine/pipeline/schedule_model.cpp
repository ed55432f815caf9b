#include "engine/pipeline/schedule_model.h"

#include <algorithm>
#include <limits>

namespace ptrain::pipeline {
namespace {

using std::size_t;

// Schedules of up to this many chunks of microbatches (pp * vpp * m) are built and simulated in
// full, as they always were: validate's numbers for such jobs stay those of their lists.
constexpr std::int64_t kChunksInFull = 1 << 13;

// A number at step j from its values at steps 1 and 2, affine past them (steps of blocks, cycles of
// blocks, or gpipe's microbatches).
double extend(double at1, double at2, std::int64_t j) {
  return at2 + static_cast<double>(j - 2) * (at2 - at1);
}

bool same_peaks(const SimResult& a, const SimResult& b) {
  return a.peak_inflight == b.peak_inflight && a.peak_live == b.peak_live;
}

// `at2` with its makespan, compute and peaks extended to step j from `at1` and `at2` (all affine
// past them); the bubbles follow.
SimResult extended(const SimResult& at1, const SimResult& at2, std::int64_t j) {
  SimResult out = at2;
  out.makespan = extend(at1.makespan, at2.makespan, j);
  for (size_t r = 0; r < out.busy.size(); ++r) {
    out.busy[r] = extend(at1.busy[r], at2.busy[r], j);
    out.bubble_fraction[r] = out.makespan > 0 ? 1.0 - out.busy[r] / out.makespan : 0.0;
    out.peak_inflight[r] = extend(at1.peak_inflight[r], at2.peak_inflight[r], j);
    out.peak_live[r] = extend(at1.peak_live[r], at2.peak_live[r], j);
  }
  out.bubble_fraction_max = *std::max_element(out.bubble_fraction.begin(), out.bubble_fraction.end());
  out.peak_inflight_max = *std::max_element(out.peak_inflight.begin(), out.peak_inflight.end());
  out.peak_live_max = *std::max_element(out.peak_live.begin(), out.peak_live.end());
  return out;
}

bool same_held(const RankBuffers& a, const RankBuffers& b) {
  return a.activation_slots == b.activation_slots && a.shared_slots == b.shared_slots &&
         a.send_buffers == b.send_buffers && a.split_weight_grad == b.split_weight_grad;
}

// at2 + (j-2)(at2 - at1) where at0, at1, at2 are affine; nothing where not (or past an int).
std::optional<int> affine_count(int at0, int at1, int at2, std::int64_t j) {
  if (at2 - at1 != at1 - at0) return std::nullopt;
  const std::int64_t value = at2 + (j - 2) * static_cast<std::int64_t>(at2 - at1);
  if (value > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(value);
}

// What each rank holds over m0 + j*k microbatches from the samples' rank_buffers: those of one and
// two blocks, equal (a block leaves as many in flight as it found), or, for gpipe, affine over all
// three. Nothing where they are not so.
std::optional<std::vector<RankBuffers>> held_over(const std::vector<RankBuffers> (&held)[3], bool gpipe,
                                                  std::int64_t j) {
  std::vector<RankBuffers> out = held[2];
  for (size_t r = 0; r < out.size(); ++r) {
    const RankBuffers &h0 = held[0][r], &h1 = held[1][r], &h2 = held[2][r];
    out[r].send_released_after.clear();
    if (!gpipe) {
      if (!same_held(h1, h2)) return std::nullopt;
      continue;
    }
    for (size_t c = 0; c < out[r].activation_slots.size(); ++c) {
      const auto slots = affine_count(h0.activation_slots[c], h1.activation_slots[c], h2.activation_slots[c], j);
      if (!slots) return std::nullopt;
      out[r].activation_slots[c] = *slots;
    }
    const auto shared = affine_count(h0.shared_slots, h1.shared_slots, h2.shared_slots, j);
    const auto sends = affine_count(h0.send_buffers, h1.send_buffers, h2.send_buffers, j);
    if (!shared || !sends) return std::nullopt;
    out[r].shared_slots = *shared;
    out[r].send_buffers = *sends;
  }
  return out;
}

}  // namespace

ScheduleModel::ScheduleModel(const config::JobSpec& spec)
    : ScheduleModel(spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages, spec.train.microbatches,
                    spec.schedule.max_in_flight) {}

ScheduleModel::ScheduleModel(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight)
    : kind_(kind), pp_(pp), vpp_(vpp), microbatches_(microbatches), cap_(max_in_flight) {
  const bool gpipe = kind == config::ScheduleKind::Gpipe;
  // Interleaved 1F1B orders by groups of pp microbatches; 1F1B under a cap repeats every cap.
  const int k = kind == config::ScheduleKind::Interleaved1F1B ? pp : max_in_flight > 0 ? max_in_flight : 1;
  const int floor = gpipe ? 1 : config::least_microbatches(kind, pp) + 2 * pp;
  const int most_cycle = std::max(4, 2 * pp / k);  // blocks: the longest steady cycle looked for
  periods_ = {floor + (microbatches - floor) % k, k, {}, {}};
  steady_blocks_ = gpipe ? 0 : 2 * most_cycle + 1;
  const bool large = static_cast<std::int64_t>(pp) * vpp * microbatches > kChunksInFull;
  if (large && microbatches >= floor && blocks() >= std::max(3, 2 * steady_blocks_)) {
    std::vector<RankBuffers> held[3];
    bool same_cap = true;
    for (int i = 0; i < 3; ++i) {
      samples_.push_back(build_at(periods_.m0 + i * k));
      held[i] = rank_buffers(samples_.back());
      same_cap = same_cap && samples_.back().max_in_flight == samples_.front().max_in_flight;
    }
    std::optional<detail::Periods> periods;
    if (!gpipe && same_cap) periods = detail::find_periods(samples_[0], samples_[1], samples_[2], k);
    if (periods) {
      steady_ = build_at(periods->m0 + steady_blocks_ * k);
      if (!detail::repeats(steady_, samples_[1], *periods) || steady_.max_in_flight != samples_[0].max_in_flight)
        periods.reset();
    }
    const std::optional<std::vector<RankBuffers>> held_all =
        gpipe || periods ? held_over(held, gpipe, blocks()) : std::nullopt;
    if (same_cap && held_all) {
      if (periods) periods_ = *periods;
      held_ = *held_all;
      max_in_flight_ = samples_.front().max_in_flight;
      return;
    }
    samples_.clear();
    steady_ = {};
  }
  full_ = build_at(microbatches);
  held_ = rank_buffers(*full_);
  max_in_flight_ = full_->max_in_flight;
}

Schedule ScheduleModel::build_at(int microbatches) const {
  return build(kind_, pp_, vpp_, microbatches, cap_);
}

SimResult ScheduleModel::simulate(const OpCosts& costs) const {
  if (full_) return pipeline::simulate(*full_, costs, Timeline::Drop);
  if (kind_ == config::ScheduleKind::Gpipe) {
    if (std::optional<SimResult> sim = simulate_gpipe(costs)) return *sim;
  } else {
    // Not yet steady: a sample twice as long, while that is still well short of the schedule.
    for (int n = steady_blocks_; 2 * n <= blocks(); n *= 2) {
      const Schedule longer = n == steady_blocks_ ? Schedule{} : build_at(periods_.m0 + n * periods_.k);
      const Schedule& sample = n == steady_blocks_ ? steady_ : longer;
      if (n != steady_blocks_ && !detail::repeats(sample, samples_[1], periods_)) break;
      if (std::optional<SimResult> sim = simulate_steady(sample, n, costs)) return *sim;
    }
  }
  return pipeline::simulate(build_at(microbatches_), costs, Timeline::Drop);
}

std::optional<SimResult> ScheduleModel::simulate_gpipe(const OpCosts& costs) const {
  SimResult at[3];
  for (int i = 0; i < 3; ++i) at[i] = pipeline::simulate(samples_[static_cast<size_t>(i)], costs, Timeline::Drop);
  if (!detail::same_shift(at[1].makespan, at[2].makespan, at[1].makespan - at[0].makespan)) return std::nullopt;
  return extended(at[1], at[2], blocks());
}

std::optional<SimResult> ScheduleModel::simulate_steady(const Schedule& sample, int blocks_in_sample,
                                                        const OpCosts& costs) const {
  InstructionTimes times;
  const SimResult whole = pipeline::simulate(sample, costs, Timeline::Drop, &times);
  const detail::ChannelIndex channel(sample);
  const std::vector<size_t> end = periods_.cut(blocks_in_sample);
  if (!detail::clean_cut(sample, channel, end)) return std::nullopt;
  const detail::CutState at_end = detail::state_at(sample, channel, times, end);
  // The shortest cycle: q blocks after which the state is the same, later.
  int cycle = 0;
  const int most_cycle = (steady_blocks_ - 1) / 2;
  for (int q = 1; q <= most_cycle && cycle == 0; ++q) {
    const std::vector<size_t> start = periods_.cut(blocks_in_sample - q);
    if (detail::clean_cut(sample, channel, start) &&
        detail::later_by_one_shift(detail::state_at(sample, channel, times, start), at_end))
      cycle = q;
  }
  if (cycle == 0) return std::nullopt;
  // Steady from `blocks_in_sample - cycle` blocks on: the schedule runs as the one of as many blocks
  // mod the cycle past there, Λ later for every cycle more.
  const int steady_from = blocks_in_sample - cycle;
  const int like = steady_from + (blocks() - steady_from) % cycle;
  const SimResult at1 = pipeline::simulate(build_at(periods_.m0 + like * periods_.k), costs, Timeline::Drop);
  const SimResult at2 =
      pipeline::simulate(build_at(periods_.m0 + (like + cycle) * periods_.k), costs, Timeline::Drop);
  if (!same_peaks(at2, whole)) return std::nullopt;
  return extended(at1, at2, 2 + (blocks() - like - cycle) / cycle);
}

ScheduleModel::Counts ScheduleModel::count(const std::function<Counts(const Schedule&)>& count) const {
  if (full_) return count(*full_);
  const Counts at1 = count(samples_[1]), at2 = count(samples_[2]);
  Counts out(at2.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = at2[i] + (blocks() - 2) * (at2[i] - at1[i]);
  return out;
}

}  // namespace ptrain::pipeline
