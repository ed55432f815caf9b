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

// `at2` with its makespan, compute and peaks extended to step j from `at1` and `at2` (all affine
// past them); the idle shares and the bubble follow.
SimResult extended(const SimResult& at1, const SimResult& at2, std::int64_t j) {
  SimResult out = at2;
  out.makespan = extend(at1.makespan, at2.makespan, j);
  for (size_t r = 0; r < out.busy.size(); ++r) {
    out.busy[r] = extend(at1.busy[r], at2.busy[r], j);
    out.peak_inflight[r] = extend(at1.peak_inflight[r], at2.peak_inflight[r], j);
    out.peak_live[r] = extend(at1.peak_live[r], at2.peak_live[r], j);
  }
  account_idle(out);
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

// The cuts after each of the last `cycles` + 1 blocks of a sample of `blocks` blocks, the last first.
std::vector<std::optional<detail::Cut>> last_cuts(const Schedule& sample, int blocks, const detail::Periods& periods,
                                                  int cycles) {
  std::vector<std::vector<size_t>> at;
  for (int q = 0; q <= cycles; ++q) at.push_back(periods.cut(blocks - q));
  return detail::clean_cuts(sample, detail::ChannelIndex(sample), at);
}

}  // namespace

ScheduleModel::ScheduleModel(const config::JobSpec& spec)
    : ScheduleModel(spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages, spec.train.microbatches,
                    spec.schedule.max_in_flight) {}

ScheduleModel::ScheduleModel(config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight)
    : kind_(kind), pp_(pp), vpp_(vpp), microbatches_(microbatches), cap_(max_in_flight) {
  const Plan plan = sampling(microbatches);
  if (plan.sampled) {
    auto samples = std::make_shared<Samples>();
    samples->periods = plan.periods;
    const int m0 = plan.periods.m0, k = plan.periods.k;
    bool same_cap = true;
    for (int i = 0; i < 3; ++i) {
      samples->at.push_back(build_at(m0 + i * k));
      samples->held[i] = rank_buffers(samples->at.back());
      for (RankBuffers& rank : samples->held[i]) rank.send_released_after = {};  // indexes the sample's lists
      same_cap = same_cap && samples->at.back().max_in_flight == samples->at.front().max_in_flight;
    }
    bool repeating = kind == config::ScheduleKind::Gpipe;  // affine instead
    const std::vector<Schedule>& at = samples->at;
    if (const auto periods = repeating ? std::nullopt : detail::find_periods(at[0], at[1], at[2], k)) {
      samples->periods = *periods;
      samples_ = samples;
      repeating = sample(kFirstProbe) != nullptr;
      samples->at[0].ranks = {};  // found the blocks; only gpipe simulates it
    }
    if (repeating && same_cap && take(std::move(samples))) return;
  }
  build_in_full();
}

ScheduleModel::ScheduleModel(InFull, config::ScheduleKind kind, int pp, int vpp, int microbatches, int max_in_flight)
    : kind_(kind), pp_(pp), vpp_(vpp), microbatches_(microbatches), cap_(max_in_flight) {
  build_in_full();
}

ScheduleModel ScheduleModel::in_full(const config::JobSpec& spec) {
  return ScheduleModel(InFull{}, spec.schedule.kind, spec.parallel.pp, spec.schedule.virtual_stages,
                       spec.train.microbatches, spec.schedule.max_in_flight);
}

void ScheduleModel::build_in_full() {
  samples_.reset();
  full_ = build_at(microbatches_);
  held_ = rank_buffers(*full_);
  for (RankBuffers& rank : held_) rank.send_released_after = {};
  max_in_flight_ = full_->max_in_flight;
}

ScheduleModel::Plan ScheduleModel::sampling(int microbatches) const {
  const bool gpipe = kind_ == config::ScheduleKind::Gpipe;
  // Interleaved 1F1B orders by groups of pp microbatches; 1F1B under a cap repeats every cap.
  const int k = kind_ == config::ScheduleKind::Interleaved1F1B ? pp_ : cap_ > 0 ? cap_ : 1;
  const int floor = gpipe ? 1 : config::least_microbatches(kind_, pp_) + 2 * pp_;
  Plan plan{{floor + (microbatches - floor) % k, k, {}, {}}, false};
  const bool large = static_cast<std::int64_t>(pp_) * vpp_ * microbatches > kChunksInFull;
  plan.sampled = large && microbatches >= floor && (microbatches - plan.periods.m0) / k >= 2 * kFirstProbe;
  return plan;
}

bool ScheduleModel::take(std::shared_ptr<const Samples> samples) {
  samples_ = std::move(samples);
  const std::optional<std::vector<RankBuffers>> held =
      held_over(samples_->held, kind_ == config::ScheduleKind::Gpipe, blocks());
  if (!held) {
    samples_.reset();
    return false;
  }
  held_ = *held;
  max_in_flight_ = samples_->at.front().max_in_flight;
  return true;
}

ScheduleModel ScheduleModel::over(int microbatches) const {
  if (samples_ != nullptr) {
    const Plan plan = sampling(microbatches);
    if (plan.sampled && plan.periods.m0 == samples_->at.front().microbatches) {
      ScheduleModel other = *this;
      other.microbatches_ = microbatches;
      if (other.take(samples_)) return other;
    }
  }
  return ScheduleModel(kind_, pp_, vpp_, microbatches, cap_);
}

Schedule ScheduleModel::build_at(int microbatches) const {
  return build(kind_, pp_, vpp_, microbatches, cap_);
}

SimResult ScheduleModel::simulate(const OpCosts& costs) const {
  if (full_) return pipeline::simulate(*full_, costs, Timeline::Drop);
  if (kind_ == config::ScheduleKind::Gpipe) {
    if (std::optional<SimResult> sim = simulate_gpipe(costs)) return *sim;
  } else {
    // Not yet steady: a sample twice as long, while that is still well short of the schedule. One
    // that did before is tried first.
    const Samples& s = *samples_;
    const bool probe_fits = 2 * s.probe_blocks <= blocks();
    for (int n = kFirstProbe; 2 * n <= blocks(); n *= 2) {
      if (probe_fits && n < s.probe_blocks) continue;
      const Sample* probe = sample(n);
      if (probe == nullptr) break;
      if (std::optional<SimResult> sim = simulate_steady(*probe, costs)) {
        s.probe_blocks = n;
        return *sim;
      }
    }
  }
  return pipeline::simulate(build_at(microbatches_), costs, Timeline::Drop);
}

std::optional<SimResult> ScheduleModel::simulate_gpipe(const OpCosts& costs) const {
  SimResult at[3];
  for (int i = 0; i < 3; ++i) at[i] = pipeline::simulate(samples_->at[static_cast<size_t>(i)], costs, Timeline::Drop);
  if (!detail::same_shift(at[1].makespan, at[2].makespan, at[1].makespan - at[0].makespan)) return std::nullopt;
  return extended(at[1], at[2], blocks());
}

const ScheduleModel::Sample* ScheduleModel::sample(int blocks_in_sample) const {
  const Samples& s = *samples_;
  auto [at, added] = s.by_blocks.try_emplace(blocks_in_sample);
  if (added) {
    at->second = {blocks_in_sample, build_at(s.periods.m0 + blocks_in_sample * s.periods.k), {}};
    if (!detail::repeats(at->second.lists, s.at[1], s.periods) || at->second.lists.max_in_flight != s.at[1].max_in_flight)
      at->second = {};  // kept, to be refused again at once
  }
  return at->second.blocks > 0 ? &at->second : nullptr;
}

std::optional<SimResult> ScheduleModel::simulate_steady(const Sample& probe, const OpCosts& costs) const {
  const detail::Periods& periods = samples_->periods;
  const int blocks_in_sample = probe.blocks;
  if (!probe.cuts) probe.cuts = last_cuts(probe.lists, blocks_in_sample, periods, (blocks_in_sample - 1) / 2);
  const LastCuts& cuts = *probe.cuts;
  InstructionTimes times;
  SimResult out = pipeline::simulate(probe.lists, costs, Timeline::Drop, &times);
  if (!cuts.front()) return std::nullopt;
  const detail::CutState at_end = detail::state_at(*cuts.front(), times);
  // The shortest cycle: q blocks after which the state is the same, Λ later.
  int cycle = 0;
  double shift = 0;
  for (size_t q = 1; q < cuts.size() && cycle == 0; ++q) {
    if (!cuts[q]) continue;
    const detail::CutState at_start = detail::state_at(*cuts[q], times);
    if (detail::later_by_one_shift(at_start, at_end))
      cycle = static_cast<int>(q), shift = at_end.clocks[0] - at_start.clocks[0];
  }
  if (cycle == 0) return std::nullopt;
  // From the sample's last `cycle` blocks on the schedule runs as it does, Λ later every cycle: the
  // full schedule as the one of as many blocks mod the cycle (the sample, or one shorter), plus a Λ
  // per cycle more.
  std::int64_t more = blocks() - blocks_in_sample;
  if (const int past = static_cast<int>(more % cycle); past != 0) {
    const Sample* like = sample(blocks_in_sample - cycle + past);
    if (like == nullptr) return std::nullopt;
    out = pipeline::simulate(like->lists, costs, Timeline::Drop);
    more += cycle - past;
  }
  const std::vector<size_t>& end = cuts.front()->at;
  const std::vector<size_t> before_last = periods.cut(blocks_in_sample - 1);
  out.makespan += static_cast<double>(more / cycle) * shift;
  for (size_t r = 0; r < out.busy.size(); ++r) {
    const double block_busy = times.busy[r][end[r] - 1] - (before_last[r] > 0 ? times.busy[r][before_last[r] - 1] : 0);
    out.busy[r] += static_cast<double>(more) * block_busy;
  }
  account_idle(out);
  return out;
}

ScheduleModel::Counts ScheduleModel::count(const std::function<Counts(const Schedule&)>& count) const {
  if (full_) return count(*full_);
  const Counts at1 = count(samples_->at[1]), at2 = count(samples_->at[2]);
  Counts out(at2.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = at2[i] + (blocks() - 2) * (at2[i] - at1[i]);
  return out;
}

}  // namespace ptrain::pipeline
