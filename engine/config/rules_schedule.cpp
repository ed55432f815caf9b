#include <numeric>

#include "engine/config/arith.h"
#include "engine/config/rules.h"
#include "engine/config/stage_placement.h"
#include "engine/config/text.h"

namespace ptrain::config {
namespace {

// Longer lists are not worth printing as a suggestion.
constexpr std::int64_t kMaxSuggestedStages = 16;

bool v_shaped(ScheduleKind kind) {
  return StagePlacement::of(kind, 1, 2).v_shape;
}

// zbv and dualpipev place two chunks per rank in a V: virtual_stages is 2, written or not.
void resolve_v_shape(LoadContext& ctx) {
  JobSpec& spec = ctx.spec();
  ScheduleSpec& s = spec.schedule;
  if (ctx.any_bad({"schedule.kind", "schedule.virtual_stages"}) || !v_shaped(s.kind)) return;
  const std::string kind = to_string(s.kind);
  if (ctx.was_written("schedule.virtual_stages") && s.virtual_stages != 2) {
    ctx.error("schedule.virtual_stages",
              cat("schedule.kind ", kind, " places two model chunks on every pipeline rank (a V: rank r holds "
                  "stages r and 2*pp-1-r), so schedule.virtual_stages is 2, got ", s.virtual_stages),
              cat("remove schedule.virtual_stages (", kind, " implies 2) or set it to 2"));
    ctx.mark_bad("schedule.virtual_stages");
  } else {
    s.virtual_stages = 2;
  }
  if (!ctx.any_bad({"parallel.pp"}) && spec.parallel.pp < 2) {
    ctx.error("schedule.kind", cat("schedule.kind ", kind, " needs parallel.pp >= 2, got ", spec.parallel.pp),
              "use schedule.kind: 1f1b (or gpipe) with pp = 1, or raise parallel.pp");
  }
  // The V puts the first and the last stage on rank 0, where the embedding and its tied copy in
  // the head would be one parameter used by two chunks: not supported.
  if (!ctx.any_bad({"model.arch", "model.tie_embeddings"}) && spec.model.tie_embeddings) {
    ctx.error("schedule.kind",
              cat("schedule.kind ", kind, " puts the first and the last stage on pipeline rank 0, which a tied "
                  "word embedding (", spec.model.arch == Arch::Gpt2 ? "gpt2 ties it" : "model.tie_embeddings: true",
                  ") does not support"),
              spec.model.arch == Arch::Gpt2 ? "use schedule.kind: zb-h1 (or another kind) for gpt2"
                                            : "set model.tie_embeddings: false, or use schedule.kind: zb-h1");
  }
}

void check_virtual_stages(LoadContext& ctx) {
  const ScheduleSpec& s = ctx.spec().schedule;
  if (ctx.any_bad({"schedule.kind", "schedule.virtual_stages"})) return;
  if (s.kind == ScheduleKind::Interleaved1F1B && s.virtual_stages < 2) {
    ctx.error(
        "schedule.virtual_stages",
        cat("schedule.kind interleaved-1f1b needs schedule.virtual_stages >= 2, got ", s.virtual_stages),
        "set schedule.virtual_stages: 2 (or more), or use schedule.kind: 1f1b");
  }
  if (s.kind != ScheduleKind::Interleaved1F1B && !v_shaped(s.kind) && s.virtual_stages > 1) {
    ctx.error("schedule.virtual_stages",
              cat("schedule.virtual_stages = ", s.virtual_stages, " needs schedule.kind: interleaved-1f1b (",
                  to_string(s.kind), " runs one model chunk per pipeline rank)"),
              "set schedule.kind: interleaved-1f1b, or schedule.virtual_stages: 1");
  }
}

// schedule.max_in_flight: only where pipeline::build can order under a cap, and no lower than the
// cap under which no backward could ever start.
void check_in_flight_cap(LoadContext& ctx) {
  const JobSpec& spec = ctx.spec();
  const ScheduleSpec& s = spec.schedule;
  if (s.max_in_flight == 0 || ctx.any_bad({"schedule.kind", "schedule.max_in_flight"})) return;
  if (!caps_in_flight(s.kind)) {
    ctx.error("schedule.max_in_flight",
              cat("schedule.max_in_flight caps 1f1b and interleaved-1f1b, not ", to_string(s.kind),
                  " (its order sets what it holds)"),
              "remove schedule.max_in_flight, or use schedule.kind: 1f1b or interleaved-1f1b");
    return;
  }
  if (ctx.any_bad({"parallel.pp", "schedule.virtual_stages"})) return;
  const int pp = spec.parallel.pp, vpp = s.virtual_stages;
  // A chunk count the kind does not run is check_virtual_stages' error, not this one's.
  if ((s.kind == ScheduleKind::OneFOneB) != (vpp == 1)) return;
  const int least = least_in_flight(pp, vpp);
  if (s.max_in_flight < least) {
    ctx.error("schedule.max_in_flight",
              cat("schedule.max_in_flight = ", s.max_in_flight, " is below ", least, ": with pp = ", pp, " and ", vpp,
                  " virtual stages every rank runs (vpp-1)*pp+1 = ", (vpp - 1) * pp + 1,
                  " chunks' forwards before the first backward can start"),
              cat("set schedule.max_in_flight: ", least, " or more"));
  }
}

// [8, 8, 7, 7]: the first stages take the remainder, since the last stage also holds the LM head.
std::string even_as_possible(std::int64_t layers, std::int64_t stages) {
  std::vector<std::string> sizes;
  for (std::int64_t i = 0; i < stages; ++i)
    sizes.push_back(std::to_string(layers / stages + (i < layers % stages ? 1 : 0)));
  return cat("[", join(sizes), "]");
}

void resolve_layers(LoadContext& ctx) {
  JobSpec& spec = ctx.spec();
  ScheduleSpec& s = spec.schedule;
  const int layers = spec.model.layers;
  const int pp = spec.parallel.pp;
  if (ctx.any_bad({"model.layers", "parallel.pp", "schedule.virtual_stages", "schedule.layers_per_stage"}))
    return;
  const std::int64_t stages = saturating_product({pp, s.virtual_stages});
  const std::string stages_text = cat("pp*virtual_stages = ", spelled_product({pp, s.virtual_stages}));
  if (stages > kMaxPipelineStages) {
    ctx.error("parallel.pp",
              cat(stages_text, " pipeline stages is more than the supported ", kMaxPipelineStages),
              "use fewer pipeline stages");
    return;
  }
  if (!s.layers_per_stage.empty()) {
    const auto entries = static_cast<std::int64_t>(s.layers_per_stage.size());
    if (entries != stages) {
      ctx.error("schedule.layers_per_stage",
                cat("has ", entries, " entries but there are ", stages_text, " stages"),
                cat("give one entry per virtual stage (", stages, " in all)"));
      return;
    }
    std::int64_t sum = std::accumulate(s.layers_per_stage.begin(), s.layers_per_stage.end(), std::int64_t{0});
    if (sum != layers) {
      ctx.error("schedule.layers_per_stage", cat("sums to ", sum, " but model.layers = ", layers),
                "make the entries add up to model.layers");
      return;
    }
    s.resolved_layers_per_stage = s.layers_per_stage;
    return;
  }
  if (layers < stages) {
    ctx.error("model.layers",
              cat("model.layers = ", layers, " is fewer than ", stages_text,
                  " stages; every stage needs at least one layer"),
              cat("use pp*virtual_stages <= ", layers));
    return;
  }
  if (layers % stages != 0) {
    std::string alternatives =
        cat("make pp*virtual_stages a divisor of ", layers, " (", list_numbers(divisors(layers)), ")");
    ctx.error(
        "model.layers",
        cat("model.layers = ", layers, " does not split evenly over ", stages_text, " stages (",
            layers % stages, " layers left over; nothing is dropped silently)"),
        stages <= kMaxSuggestedStages
            ? cat("set schedule.layers_per_stage: ", even_as_possible(layers, stages), ", or ", alternatives)
            : alternatives);
    return;
  }
  s.resolved_layers_per_stage.assign(static_cast<std::size_t>(stages), static_cast<int>(layers / stages));
}

constexpr int kMaxMicrobatches = 16384;
constexpr std::int64_t kMaxScheduledChunks = 1 << 20;

void resolve_microbatches(LoadContext& ctx) {
  JobSpec& spec = ctx.spec();
  TrainSpec& t = spec.train;
  const int pp = spec.parallel.pp;
  if (ctx.any_bad({"train.global_batch", "train.micro_batch", "parallel.dp"})) return;
  const std::int64_t per_microbatch = saturating_product({t.micro_batch, spec.parallel.dp});
  const std::string per_text =
      cat("train.micro_batch*dp = ", spelled_product({t.micro_batch, spec.parallel.dp}));
  if (t.global_batch % per_microbatch != 0) {
    ctx.error("train.global_batch",
              cat("train.global_batch = ", t.global_batch, " is not divisible by ", per_text),
              cat("use global_batch ", nearby_multiples(t.global_batch, per_microbatch),
                  ", or change micro_batch"));
    return;
  }
  const std::int64_t microbatches = t.global_batch / per_microbatch;
  // validate simulates every microbatch of the schedule; beyond this the step is better served
  // by a larger micro_batch anyway.
  const std::int64_t least_micro_batch =
      (t.global_batch + saturating_product({spec.parallel.dp, kMaxMicrobatches}) - 1) /
      saturating_product({spec.parallel.dp, kMaxMicrobatches});
  if (microbatches > kMaxMicrobatches) {
    ctx.error("train.global_batch",
              cat("global_batch/(micro_batch*dp) = ", microbatches, " microbatches per step; at most ",
                  kMaxMicrobatches, " are supported"),
              cat("raise train.micro_batch to ", least_micro_batch, " or more, or raise the data-parallel degree"));
    return;
  }
  t.microbatches = static_cast<int>(microbatches);
  // Every chunk of every microbatch is an op of the schedule that validate, plan and schedule
  // simulate and check (0.43-0.53 GB and 1-5 s at the limit: docs/config.md, "Bounds").
  if (!ctx.any_bad({"parallel.pp", "schedule.virtual_stages"}) &&
      saturating_product({pp, spec.schedule.virtual_stages}) <= kMaxPipelineStages) {  // else said there
    const std::int64_t chunks = saturating_product({pp, spec.schedule.virtual_stages, t.microbatches});
    if (chunks > kMaxScheduledChunks) {
      ctx.error("train.global_batch",
                cat("pp*virtual_stages*microbatches = ", spelled_product({pp, spec.schedule.virtual_stages,
                                                                          t.microbatches}),
                    " chunks of microbatches to schedule; at most ", kMaxScheduledChunks,
                    " are supported"),
                "raise train.micro_batch or the data-parallel degree, or use fewer pipeline stages");
      return;
    }
  }
  if (ctx.any_bad({"schedule.kind", "parallel.pp"})) return;
  const ScheduleKind kind = spec.schedule.kind;
  const std::string count_text =
      cat(t.microbatches, " (global_batch/(micro_batch*dp) = ", t.global_batch, "/", per_microbatch, ")");
  if (const int least = least_microbatches(kind, pp); t.microbatches < least) {
    ctx.error("train.global_batch",
              cat(to_string(kind), " with pp = ", pp, " needs at least ", least, " microbatches per step (",
                  least == pp ? "pp" : "2*pp", "), got ", count_text),
              cat("raise train.global_batch to ", saturating_product({least, per_microbatch}),
                  " or more, lower train.micro_batch", v_shaped(kind) ? "" : ", or use schedule.kind: gpipe"));
  }
  if (kind == ScheduleKind::Interleaved1F1B && t.microbatches % pp != 0) {
    ctx.error("train.global_batch",
              cat("interleaved-1f1b needs the number of microbatches to be a multiple of pp = ", pp, ", got ",
                  count_text),
              cat("use train.global_batch ",
                  nearby_multiples(t.global_batch, saturating_product({pp, per_microbatch}))));
  }
}

// ZeRO 2 and 3 reduce each microbatch's gradients of a unit as soon as its backward has written them
// (DeepSpeed does not combine them with pipeline parallelism at all). Two pipelines write them later:
// with pp > 1 a tied word embedding's copies on the first and the last stage sum their gradients
// once the step's backward is done, and zb-h1, zbv and dualpipev write weight gradients in W,
// between other microbatches' backwards.
void check_zero_with_pipeline(LoadContext& ctx) {
  const JobSpec& spec = ctx.spec();
  const ParallelSpec& p = spec.parallel;
  if (ctx.any_bad({"parallel.zero", "schedule.kind", "parallel.pp", "model.arch", "model.tie_embeddings"})) return;
  const ScheduleKind kind = spec.schedule.kind;
  if (p.zero <= most_zero_stage(kind, p.pp, spec.model.tie_embeddings)) return;
  if (splits_weight_grad(kind)) {
    const std::string name = to_string(kind);
    ctx.error("parallel.zero",
              cat("zero ", p.zero, " with schedule.kind ", name,
                  ": ZeRO 2 and 3 reduce a microbatch's gradients when its backward has written them, but ",
                  name, " writes the weight gradients later, in W"),
              "use parallel.zero: 1 (shards the optimizer state), or schedule.kind: 1f1b");
    return;
  }
  ctx.error(
      "parallel.zero",
      cat("zero ", p.zero, " with pp = ", p.pp, " and a tied word embedding (",
          spec.model.arch == Arch::Gpt2 ? "gpt2 ties it" : "model.tie_embeddings: true",
          "): its copies on the first and the last stage sum their gradients after the backward, but "
          "ZeRO 2 and 3 reduce gradients per microbatch"),
      "use parallel.zero: 1 (shards the optimizer state, like Megatron's distributed optimizer), or pp: 1");
}

}  // namespace

void resolve_schedule(LoadContext& ctx) {
  resolve_v_shape(ctx);
  check_virtual_stages(ctx);
  check_in_flight_cap(ctx);
  resolve_layers(ctx);
  resolve_microbatches(ctx);
  check_zero_with_pipeline(ctx);
}

}  // namespace ptrain::config
