#include "engine/plan/search.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "engine/config/job_grid.h"
#include "engine/model/layer_description.h"
#include "engine/model/param_registry.h"
#include "engine/pipeline/schedule_model.h"
#include "engine/plan/fit.h"
#include "engine/plan/fp8_refusal.h"
#include "engine/plan/memory_limit.h"
#include "engine/plan/step_time.h"

namespace ptrain::plan {
namespace {

constexpr int kMaxContextParallel = 16;
constexpr std::array<int, 2> kInterleavedStages = {2, 4};
constexpr std::array<config::Recompute, 3> kRecomputeLeastFirst = {
    config::Recompute::None, config::Recompute::Selective, config::Recompute::Full};

// 1, 2, 4, ... up to `limit`, which may be near INT_MAX (global_batch / dp): doubled in 64 bits.
std::vector<int> powers_of_two_up_to(int limit) {
  std::vector<int> values;
  for (std::int64_t v = 1; v <= limit; v *= 2) values.push_back(static_cast<int>(v));
  return values;
}

std::vector<int> divisors_of(int n) {
  std::vector<int> values;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) values.push_back(d);
  return values;
}

// Empty when the layers split evenly; else the extra layers go to the inner stages first, since
// the first and last stages also hold the embedding and the head.
std::vector<int> spread_layers(int layers, int stages) {
  if (layers % stages == 0) return {};
  std::vector<int> sizes(static_cast<std::size_t>(stages), layers / stages);
  int extra = layers % stages;
  for (int s = 1; s + 1 < stages && extra > 0; ++s, --extra) ++sizes[static_cast<std::size_t>(s)];
  sizes.front() += extra;  // extra < stages, so at most one is left here
  return sizes;
}

struct Schedule {
  config::ScheduleKind kind;
  int virtual_stages;
};

// The ways a cp group reaches the other ranks' keys: none to choose at cp 1.
std::vector<config::CpComm> cp_comms_for(int cp) {
  if (cp == 1) return {config::CpComm::Allgather};
  return {config::CpComm::Allgather, config::CpComm::Ring, config::CpComm::A2a};
}

std::vector<Schedule> schedules_for(int pp, int layers) {
  std::vector<Schedule> kinds = {{config::ScheduleKind::OneFOneB, 1}};
  if (pp == 1) return kinds;
  kinds.push_back({config::ScheduleKind::ZbH1, 1});
  for (int v : kInterleavedStages)
    if (pp * v <= layers) kinds.push_back({config::ScheduleKind::Interleaved1F1B, v});
  if (2 * pp <= layers) {  // two chunks per rank in a V
    kinds.push_back({config::ScheduleKind::Zbv, 2});
    kinds.push_back({config::ScheduleKind::DualPipeV, 2});
  }
  return kinds;
}

double comm_bytes(const Estimate& est) {
  double bytes = 0;
  for (const auto& [axis, volume] : est.comm_bytes_per_step) bytes += volume.total();
  return bytes;
}

// Faster first; among equally fast layouts, the one that communicates less (fewer collectives to
// wait on or fail), then the one with more memory to spare.
bool ranks_before(const RankedLayout& a, const RankedLayout& b) {
  if (a.estimate.step_time_s != b.estimate.step_time_s)
    return a.estimate.step_time_s < b.estimate.step_time_s;
  if (comm_bytes(a.estimate) != comm_bytes(b.estimate))
    return comm_bytes(a.estimate) < comm_bytes(b.estimate);
  return a.estimate.peak_memory_bytes() < b.estimate.peak_memory_bytes();
}

struct ModelCounts {
  ModelCounts() = default;
  explicit ModelCounts(const config::ModelSpec& model)
      : registry(model::build_registry(model)), matmul(matmul_params(registry, model)) {}
  std::vector<model::ParamInfo> registry;
  MatmulParams matmul;
};

struct Candidate {
  Layout layout;
  // Step time of the first rank of every stage (the makespan plus the largest tail): the full
  // estimate's step time, a maximum over all ranks, is at least this.
  double bound = 0;
};

// The schedule of a layout under a cap on the microbatches in flight (0: none), modelled once and
// shared by the layouts that run it: from short samples where it is long, so that neither time nor
// memory grows with the microbatches.
using ScheduleRuns = std::function<const pipeline::ScheduleModel&(int max_in_flight)>;

// For each ZeRO stage where ranks shard, the least recompute with which `derived` (a layout
// that passed the rules) fits, as a candidate with its bound; and, for each less recompute, the
// largest cap on the microbatches in flight with which it fits. False if none fits.
bool add_fitting(const config::JobSpec& derived, Layout layout, const ModelCounts& model,
                 const ScheduleRuns& runs, const HardwareProfile& hw, SearchResult& result,
                 std::vector<Candidate>& candidates) {
  const std::vector<int> caps = smaller_in_flight_caps(derived, runs(0).held());
  const config::ParallelSpec& p = derived.parallel;
  const bool experts = derived.model.moe.has_value();
  // What each stage holds (ZeRO 3's gathers follow the schedule's order), by cap.
  std::map<int, std::vector<RankParams>> params_by_cap;
  const std::vector<LinkTiers> tiers =
      stage_link_tiers(config::job_grid(derived), derived.cluster.gpus_per_node, experts);

  const bool sharded = p.dp * p.cp > 1 || (experts && p.expert_dp() > 1);
  config::JobSpec spec = derived;  // only the ZeRO stage and the recompute change below
  // The pipeline's costs depend on the recompute and, under fp8, on whether the ZeRO stage keeps the
  // weights' FP8 codes for the step (model::keeps_fp8_weight_copies); not on the cap.
  std::map<std::pair<std::size_t, bool>, pipeline::OpCosts> costs;            // by recompute and codes kept
  std::map<std::tuple<std::size_t, bool, int>, pipeline::SimResult> simulated;  // and by cap
  const MemoryLimit limit = memory_limit(derived, hw);  // as validate checks it (CPU ranks share a host)
  bool fits = false;
  // Whether the layout fits with this cap (and the ZeRO stage and recompute set); if so a candidate.
  auto add_if_fitting = [&](std::size_t r, int cap) {
    const pipeline::ScheduleModel& run = runs(cap);
    auto [held_params, first_time] = params_by_cap.try_emplace(cap);
    if (first_time) held_params->second = stage_params(derived, run, model.registry);
    const std::vector<RankParams>& params = held_params->second;
    layout.max_in_flight = spec.schedule.max_in_flight = cap;
    const MemoryBreakdown peak = peak_memory(spec, params, run.held()).memory;
    const double bytes = peak.total();
    if (!result.least_memory || bytes < result.least_memory_bytes) {
      result.least_memory = layout;
      result.least_memory_bytes = bytes;
    }
    if (!limit.fits(peak)) return false;
    const bool kept = model::keeps_fp8_weight_copies(spec);
    auto [cost, first_costs] = costs.try_emplace({r, kept});
    if (first_costs) cost->second = stage_op_costs(spec, hw, stage_flops(spec, model.matmul), tiers);
    auto [at, added] = simulated.try_emplace({r, kept, cap});
    if (added) at->second = run.simulate(cost->second);
    const pipeline::SimResult& sim = at->second;
    // Exact for these ranks; other tp and ep ranks of a stage can only add to it.
    // Summed in the order the estimate sums, so an exact bound is bitwise equal.
    StepTail tail;
    for (int q = 0; q < p.pp; ++q) {
      const auto i = static_cast<std::size_t>(q);
      const StepTail t = step_tail(spec, hw, params[i], tiers[i], q, cost->second, sim);
      if (t.total() > tail.total()) tail = t;
    }
    candidates.push_back({layout, sim.makespan + tail.tp_grads + tail.dp_exposed + tail.optimizer});
    fits = true;
    return true;
  };
  // The rules checked the layout at ZeRO 0; the stages above it are the ones its pipeline allows.
  const int most_zero =
      sharded ? config::most_zero_stage(derived.schedule.kind, p.pp, derived.model.tie_embeddings) : 0;
  for (int zero = 0; zero <= most_zero; ++zero) {
    for (std::size_t r = 0; r < kRecomputeLeastFirst.size(); ++r) {
      layout.zero = spec.parallel.zero = zero;
      layout.recompute = spec.train.recompute = kRecomputeLeastFirst[r];
      if (add_if_fitting(r, 0)) break;
      for (const int cap : caps)
        if (add_if_fitting(r, cap)) break;
    }
  }
  return fits;
}

SearchProgress progress_of(const SearchResult& result, const std::vector<Candidate>& candidates,
                           bool ranking) {
  return {result.layouts,
          result.fitting,
          result.over_memory,
          result.invalid,
          ranking,
          result.estimated,
          static_cast<int>(candidates.size())};
}

}  // namespace

config::JobSpec with_layout(config::JobSpec spec, const Layout& layout) {
  config::ParallelSpec& p = spec.parallel;
  p.tp = layout.tp;
  p.cp = layout.cp;
  p.pp = layout.pp;
  p.ep = layout.ep;
  p.dp_auto = true;
  p.sequence_parallel = layout.sequence_parallel;
  p.zero = layout.zero;
  p.cp_comm = layout.cp_comm;
  spec.schedule.kind = layout.schedule;
  spec.schedule.virtual_stages = layout.virtual_stages;
  spec.schedule.layers_per_stage = layout.layers_per_stage;
  spec.schedule.max_in_flight = layout.max_in_flight;
  spec.train.micro_batch = layout.micro_batch;
  spec.train.recompute = layout.recompute;
  spec.train.precision = layout.precision;
  return spec;
}

std::vector<std::string> layout_assignments(const Layout& layout, bool experts) {
  std::string layers = "null";
  if (!layout.layers_per_stage.empty()) {
    layers = "[";
    for (std::size_t i = 0; i < layout.layers_per_stage.size(); ++i)
      layers += (i > 0 ? ", " : "") + std::to_string(layout.layers_per_stage[i]);
    layers += "]";
  }
  std::vector<std::string> keys = {
      "parallel.tp=" + std::to_string(layout.tp),
      "parallel.cp=" + std::to_string(layout.cp),
      std::string("parallel.cp_comm=") + config::to_string(layout.cp_comm),
      "parallel.pp=" + std::to_string(layout.pp),
      "parallel.dp=auto",
      std::string("parallel.sequence_parallel=") + (layout.sequence_parallel ? "true" : "false"),
      "parallel.zero=" + std::to_string(layout.zero),
      std::string("schedule.kind=") + config::to_string(layout.schedule),
      "schedule.virtual_stages=" + std::to_string(layout.virtual_stages),
      "schedule.layers_per_stage=" + layers,
      "schedule.max_in_flight=" + (layout.max_in_flight > 0 ? std::to_string(layout.max_in_flight) : "null"),
      "train.micro_batch=" + std::to_string(layout.micro_batch),
      std::string("train.recompute=") + config::to_string(layout.recompute),
      std::string("train.precision=") + config::to_string(layout.precision)};
  if (experts) keys.insert(keys.begin() + 3, "parallel.ep=" + std::to_string(layout.ep));
  return keys;
}

SearchResult search_layouts(const config::LoadResult& job, const HardwareProfile& hw, int top,
                            const SearchProgressCallback& progress) {
  const config::JobSpec& base = job.spec;
  const int world = base.world;
  const int layers = base.model.layers;
  const bool experts = base.model.arch == config::Arch::Mixtral;
  const std::vector<int> eps =
      experts ? divisors_of(base.model.moe.value_or(config::MoeSpec{}).experts) : std::vector<int>{1};

  SearchResult result;
  std::vector<Candidate> candidates;
  std::map<int, ModelCounts> models;  // by padded vocab, the only model field a layout changes
  // kind, pp, vpp, m, max_in_flight
  std::map<std::tuple<config::ScheduleKind, int, int, int, int>, pipeline::ScheduleModel> schedules;
  // kind, pp, vpp, max_in_flight: a sampled model of it, whose samples serve its other microbatch counts
  std::map<std::tuple<config::ScheduleKind, int, int, int>, const pipeline::ScheduleModel*> sampled;
  // Derives `layout` by validate's rules and, if it passes them, adds it to the candidates with the
  // least recompute that fits; its derived job where it passed.
  auto look_at = [&](const Layout& layout) -> std::optional<config::JobSpec> {
    ++result.layouts;
    config::LoadResult derived = config::rederive(job, with_layout(base, layout));
    if (!derived.ok()) {
      ++result.invalid;
      if (!result.first_rule_broken) result.first_rule_broken = derived.diags.errors.front();
      if (progress) progress(progress_of(result, candidates, false));
      return std::nullopt;
    }
    auto [model, new_model] = models.try_emplace(derived.spec.model.padded_vocab);
    if (new_model) model->second = ModelCounts(derived.spec.model);
    const ScheduleRuns runs = [&](int cap) -> const pipeline::ScheduleModel& {
      const int m = derived.spec.train.microbatches;
      const auto key = std::tuple(layout.schedule, layout.pp, layout.virtual_stages, m, cap);
      auto run = schedules.find(key);
      if (run != schedules.end()) return run->second;
      const auto family = std::tuple(layout.schedule, layout.pp, layout.virtual_stages, cap);
      const auto kin = sampled.find(family);
      run =
          schedules
              .try_emplace(key, kin != sampled.end() ? kin->second->over(m)
                                                     : pipeline::ScheduleModel(layout.schedule, layout.pp,
                                                                               layout.virtual_stages, m, cap))
              .first;
      if (run->second.sampled()) sampled.try_emplace(family, &run->second);
      return run->second;
    };
    const bool fits = add_fitting(derived.spec, layout, model->second, runs, hw, result, candidates);
    ++(fits ? result.fitting : result.over_memory);
    if (progress) progress(progress_of(result, candidates, false));
    return std::move(derived.spec);
  };
  // An fp32 job stays fp32 (asked for); a bf16 or fp8 job is tried in bf16 and, where `run` would
  // execute it, in fp8.
  const bool fp32 = base.train.precision == config::Precision::Fp32;
  for (int tp : powers_of_two_up_to(std::min(world, base.cluster.gpus_per_node))) {
    for (int cp : powers_of_two_up_to(std::min(world / tp, kMaxContextParallel))) {
      for (config::CpComm cp_comm : cp_comms_for(cp)) {
        for (int pp : powers_of_two_up_to(std::min(world / (tp * cp), layers))) {
          if (world % (tp * cp * pp) != 0) continue;
          const int dp = world / (tp * cp * pp);
          for (const Schedule& schedule : schedules_for(pp, layers)) {
            for (int ep : eps) {
              for (const int mb : powers_of_two_up_to(base.train.global_batch / dp)) {
                Layout layout{tp,
                              cp,
                              pp,
                              ep,
                              schedule.kind,
                              schedule.virtual_stages,
                              spread_layers(layers, pp * schedule.virtual_stages),
                              mb};
                layout.sequence_parallel = base.parallel.sequence_parallel && tp > 1;
                layout.cp_comm = cp_comm;
                layout.precision = fp32 ? config::Precision::Fp32 : config::Precision::Bf16;
                const std::optional<config::JobSpec> passed = look_at(layout);
                if (fp32 || !passed) continue;  // a layout that breaks a rule breaks it in fp8 too
                if (std::optional<config::EngineLimit> refused = fp8_refusal(*passed, hw)) {
                  if (result.fp8_refused++ == 0) result.first_fp8_refusal = std::move(refused);
                  continue;
                }
                layout.precision = config::Precision::Fp8;
                look_at(layout);
              }
            }
          }
        }
      }
    }
  }

  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; });
  for (const Candidate& candidate : candidates) {
    if (static_cast<int>(result.best.size()) == top &&
        candidate.bound > result.best.back().estimate.step_time_s)
      break;
    config::LoadResult derived = config::rederive(job, with_layout(base, candidate.layout));
    if (!derived.ok()) throw std::logic_error("plan: a candidate breaks a rule: " + derived.diags.errors.front().format());
    Estimate est = estimate(derived, hw);
    ++result.estimated;
    if (progress) progress(progress_of(result, candidates, true));
    if (!est.diags.ok()) continue;
    est.groups.clear();  // every rank's groups, world-sized lists, are validate's to print, not the ranking's
    RankedLayout ranked{candidate.layout, std::move(derived), std::move(est), candidate.bound};
    auto at = std::upper_bound(result.best.begin(), result.best.end(), ranked, ranks_before);
    result.best.insert(at, std::move(ranked));
    if (static_cast<int>(result.best.size()) > top) result.best.pop_back();
  }
  return result;
}

}  // namespace ptrain::plan
