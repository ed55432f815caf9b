#include "engine/plan/fit.h"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>

#include "engine/pipeline/schedule_model.h"
#include "engine/plan/memory_limit.h"
#include "engine/plan/rank_params.h"

namespace ptrain::plan {
namespace {

// One neighbouring layout: an index into each dimension's options (0 = unchanged).
enum Dim { kZero, kInFlight, kRecompute, kTp, kPp, kMicroBatch, kDims };
using Choice = std::array<int, kDims>;

struct Options {
  std::array<std::vector<int>, kDims> values;  // values[d][0] is the job's own
};

// schedule.max_in_flight: the job's own, then smaller caps.
std::vector<int> in_flight_options(const config::JobSpec& spec) {
  std::vector<int> values{spec.schedule.max_in_flight};
  if (spec.parallel.pp == 1 || !config::caps_in_flight(spec.schedule.kind)) return values;
  const std::vector<int> smaller = smaller_in_flight_caps(spec, pipeline::ScheduleModel(spec).held());
  values.insert(values.end(), smaller.begin(), smaller.end());
  return values;
}

Options neighbour_options(const config::JobSpec& spec) {
  Options o;
  const config::ParallelSpec& p = spec.parallel;
  for (int z = p.zero; z <= 3; ++z) o.values[kZero].push_back(z);
  o.values[kInFlight] = in_flight_options(spec);
  for (int r = static_cast<int>(spec.train.recompute); r <= static_cast<int>(config::Recompute::Full); ++r)
    o.values[kRecompute].push_back(r);
  const int tp_cap = std::max(p.tp, spec.cluster.gpus_per_node);
  for (int tp = p.tp; tp <= tp_cap; tp *= 2) o.values[kTp].push_back(tp);
  for (int pp = p.pp; pp * spec.schedule.virtual_stages <= spec.model.layers; pp *= 2)
    o.values[kPp].push_back(pp);
  for (int mb = spec.train.micro_batch; mb >= 1; mb /= 2) {
    o.values[kMicroBatch].push_back(mb);
    if (mb % 2 != 0) break;
  }
  return o;
}

// The job with a neighbour's values, derived by the loader's rules; nothing if they reject it.
std::optional<config::JobSpec> derive(const config::LoadResult& job, const Options& o, const Choice& c) {
  config::JobSpec s = job.spec;
  s.parallel.zero = o.values[kZero][c[kZero]];
  s.schedule.max_in_flight = o.values[kInFlight][c[kInFlight]];
  s.train.recompute = static_cast<config::Recompute>(o.values[kRecompute][c[kRecompute]]);
  s.parallel.tp = o.values[kTp][c[kTp]];
  s.parallel.pp = o.values[kPp][c[kPp]];
  // A cap is chosen for the job's pp; a larger pp needs at least its own least (a tighter cap
  // cannot start a backward).
  if (s.schedule.max_in_flight > 0)
    s.schedule.max_in_flight =
        std::max(s.schedule.max_in_flight, config::least_in_flight(s.parallel.pp, s.schedule.virtual_stages));
  s.train.micro_batch = o.values[kMicroBatch][c[kMicroBatch]];
  s.parallel.dp_auto = true;  // dp follows from the world size
  config::LoadResult derived = config::rederive(job, std::move(s));
  if (!derived.ok()) return std::nullopt;
  return std::move(derived.spec);
}

std::vector<Choice> choices_nearest_first(const Options& o) {
  std::vector<Choice> all(1, Choice{});
  for (int d = 0; d < kDims; ++d) {
    std::vector<Choice> grown;
    for (const Choice& c : all) {
      for (int i = 0; i < static_cast<int>(o.values[d].size()); ++i) {
        Choice next = c;
        next[d] = i;
        grown.push_back(next);
      }
    }
    all = std::move(grown);
  }
  auto distance = [](const Choice& c) {
    int changed = 0, steps = 0;
    for (int i : c) {
      changed += i > 0 ? 1 : 0;
      steps += i;
    }
    return std::pair(changed, steps);
  };
  // Fewest keys, then smallest steps, then changes in the earlier dimensions first (greater choice).
  std::sort(all.begin(), all.end(), [&](const Choice& a, const Choice& b) {
    const auto da = distance(a), db = distance(b);
    return da != db ? da < db : a > b;
  });
  all.erase(all.begin());  // the job itself: distance (0, 0)
  return all;
}

}  // namespace

std::vector<int> smaller_in_flight_caps(const config::JobSpec& spec, const std::vector<pipeline::RankBuffers>& held) {
  const int pp = spec.parallel.pp, vpp = spec.schedule.virtual_stages;
  if (pp == 1 || !config::caps_in_flight(spec.schedule.kind)) return {};
  int most = 0;
  for (const pipeline::RankBuffers& rank : held) {
    const int chunks = rank.shared_slots > 0
                           ? rank.shared_slots
                           : std::accumulate(rank.activation_slots.begin(), rank.activation_slots.end(), 0);
    most = std::max(most, (chunks + vpp - 1) / vpp);
  }
  const int least = config::least_in_flight(pp, vpp);
  std::vector<int> caps;
  for (const int cap : {most * 3 / 4, most / 2, least})
    if (cap >= least && cap < (caps.empty() ? most : caps.back())) caps.push_back(cap);
  return caps;
}

PeakMemory peak_memory(const config::JobSpec& spec, const std::vector<model::ParamInfo>& registry) {
  const pipeline::ScheduleModel schedule(spec);
  return peak_memory(spec, stage_params(spec, schedule, registry), schedule.held());
}

std::vector<RankParams> stage_params(const config::JobSpec& spec, const pipeline::ScheduleModel& schedule,
                                     const std::vector<model::ParamInfo>& registry) {
  std::vector<RankParams> params;
  for (int r = 0; r < spec.parallel.pp; ++r)
    params.push_back(count_rank_params(spec, schedule,
                                       model::local_params(registry, model::shard_coords(spec, r, 0, 0)), r));
  return params;
}

PeakMemory peak_memory(const config::JobSpec& spec, const std::vector<RankParams>& stage_params,
                       const std::vector<pipeline::RankBuffers>& held) {
  PeakMemory peak;
  const ActivationCounts activations(spec);
  for (int r = 0; r < spec.parallel.pp; ++r) {
    const auto i = static_cast<size_t>(r);
    const MemoryBreakdown m = rank_memory(activations, stage_params[i], r, held[i]);
    if (r == 0 || m.total() > peak.memory.total()) peak = {m, r};
  }
  return peak;
}

std::string FittingLayout::set_line() const {
  std::string line;
  for (const auto& [key, value] : changes)
    line += (line.empty() ? "" : " ") + std::string("--set ") + key + "=" + value;
  return line;
}

std::optional<FittingLayout> nearest_fitting_layout(const config::LoadResult& job,
                                                    const HardwareProfile& hw) {
  const config::JobSpec& spec = job.spec;
  const Options options = neighbour_options(spec);
  std::map<int, std::vector<model::ParamInfo>> registries;  // by padded vocab, the only field tp changes
  for (const Choice& c : choices_nearest_first(options)) {
    const std::optional<config::JobSpec> candidate = derive(job, options, c);
    if (!candidate) continue;
    auto [it, inserted] = registries.try_emplace(candidate->model.padded_vocab);
    if (inserted) it->second = model::build_registry(candidate->model);
    const PeakMemory peak = peak_memory(*candidate, it->second);
    if (!memory_limit(*candidate, hw).fits(peak.memory)) continue;

    FittingLayout fit{{}, peak};
    const config::ParallelSpec& p = candidate->parallel;
    if (c[kZero] > 0) fit.changes.emplace_back("parallel.zero", std::to_string(p.zero));
    if (candidate->schedule.max_in_flight != spec.schedule.max_in_flight)
      fit.changes.emplace_back("schedule.max_in_flight", std::to_string(candidate->schedule.max_in_flight));
    if (c[kRecompute] > 0)
      fit.changes.emplace_back("train.recompute", config::to_string(candidate->train.recompute));
    if (c[kTp] > 0) fit.changes.emplace_back("parallel.tp", std::to_string(p.tp));
    if (c[kPp] > 0) fit.changes.emplace_back("parallel.pp", std::to_string(p.pp));
    if (c[kMicroBatch] > 0)
      fit.changes.emplace_back("train.micro_batch", std::to_string(candidate->train.micro_batch));
    if (!spec.parallel.dp_auto && p.dp != spec.parallel.dp)
      fit.changes.emplace_back("parallel.dp", std::to_string(p.dp));
    return fit;
  }
  return std::nullopt;
}

}  // namespace ptrain::plan
