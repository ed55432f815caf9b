#include "engine/config/schema.h"

#include "engine/config/text.h"
#include "engine/config/value_reader.h"

namespace ptrain::config {
namespace {

constexpr std::string_view kDegreeFix = "degrees are at least 1 (1 turns the axis off)";
constexpr std::int64_t kMaxExperts = 1 << 12;
// A year: a longer wait is a hang, and in nanoseconds (Gloo's and NCCL's unit) it overflows int64.
constexpr double kMaxTimeoutSeconds = 365.0 * 24 * 3600;

MoeSpec& moe_of(JobSpec& spec) {
  if (!spec.model.moe) spec.model.moe.emplace();
  return *spec.model.moe;
}

void enter_moe(JobSpec& spec, bool present) {
  if (present) {
    moe_of(spec);
  } else {
    spec.model.moe.reset();
  }
}

void read_dp(ValueReader& r, JobSpec& s) {
  if (r.is_word("auto")) {
    s.parallel.dp_auto = true;
    return;
  }
  if (!r.is_number()) {
    r.fail(cat("expected auto or an integer >= 1, got ", r.described()), "write dp: auto, or a whole number");
    return;
  }
  if (r.integer(s.parallel.dp, 1, kMaxInt32, "use auto, or a value >= 1")) s.parallel.dp_auto = false;
}

constexpr SchemaEntry kMoeEntries[] = {
    // Beyond DeepSeek-V3's 256 and Kimi K2's 384 with room: validate lays out every expert's tensors.
    {"experts", [](ValueReader& r, JobSpec& s) { r.integer(moe_of(s).experts, 1, kMaxExperts); }},
    {"top_k", [](ValueReader& r, JobSpec& s) { r.integer(moe_of(s).top_k, 1, kMaxExperts); }},
    {"capacity_factor",
     [](ValueReader& r, JobSpec& s) { r.number(moe_of(s).capacity_factor, NumberRange::positive()); }},
    {"aux_loss_coef",
     [](ValueReader& r, JobSpec& s) { r.number(moe_of(s).aux_loss_coef, NumberRange::non_negative()); }},
};
constexpr Section kMoe{"model.moe", kMoeEntries, &enter_moe};

constexpr SchemaEntry kModelEntries[] = {
    {"arch", [](ValueReader& r, JobSpec& s) { r.choice(s.model.arch); }},
    // Bounded so that what validate and plan build per layer stays small (the deepest published
    // transformers have about a thousand layers).
    {"layers", [](ValueReader& r, JobSpec& s) { r.integer(s.model.layers, 1, kMaxLayers); }},
    {"hidden", [](ValueReader& r, JobSpec& s) { r.integer(s.model.hidden, 1); }},
    {"heads", [](ValueReader& r, JobSpec& s) { r.integer(s.model.heads, 1); }},
    {"kv_heads", [](ValueReader& r, JobSpec& s) { r.optional_integer(s.model.kv_heads); }},
    {"ffn_hidden", [](ValueReader& r, JobSpec& s) { r.optional_integer(s.model.ffn_hidden); }},
    {"vocab", [](ValueReader& r, JobSpec& s) { r.integer(s.model.vocab, 1); }},
    {"seq_len", [](ValueReader& r, JobSpec& s) { r.integer(s.model.seq_len, 1); }},
    {"norm_eps", [](ValueReader& r, JobSpec& s) { r.number(s.model.norm_eps, NumberRange::positive()); }},
    // RoPE's base: the frequencies theta^(-2i/D) fall with i only above 1 (and run in fp32).
    {"rope_theta",
     [](ValueReader& r, JobSpec& s) {
       r.number(s.model.rope_theta, NumberRange{{1, false}, NumberRange::Bound{1e30, true}});
     }},
    {"tie_embeddings", [](ValueReader& r, JobSpec& s) { r.boolean(s.model.tie_embeddings); }},
    {"moe", nullptr, &kMoe},
};
constexpr Section kModel{"model", kModelEntries};

constexpr SchemaEntry kParallelEntries[] = {
    {"tp", [](ValueReader& r, JobSpec& s) { r.integer(s.parallel.tp, 1, kMaxInt32, kDegreeFix); }},
    {"pp", [](ValueReader& r, JobSpec& s) { r.integer(s.parallel.pp, 1, kMaxInt32, kDegreeFix); }},
    {"cp", [](ValueReader& r, JobSpec& s) { r.integer(s.parallel.cp, 1, kMaxInt32, kDegreeFix); }},
    {"ep", [](ValueReader& r, JobSpec& s) { r.integer(s.parallel.ep, 1, kMaxInt32, kDegreeFix); }},
    {"dp", &read_dp},
    {"order", [](ValueReader& r, JobSpec& s) { r.text(s.parallel.order, false); }},
    {"sequence_parallel", [](ValueReader& r, JobSpec& s) { r.boolean(s.parallel.sequence_parallel); }},
    {"zero",
     [](ValueReader& r, JobSpec& s) { r.integer(s.parallel.zero, 0, 3, "ZeRO stages are 0, 1, 2 or 3"); }},
    {"cp_comm", [](ValueReader& r, JobSpec& s) { r.choice(s.parallel.cp_comm); }},
    {"offload", [](ValueReader& r, JobSpec& s) { r.choice(s.parallel.offload); }},
};
constexpr Section kParallel{"parallel", kParallelEntries};

constexpr SchemaEntry kScheduleEntries[] = {
    {"kind", [](ValueReader& r, JobSpec& s) { r.choice(s.schedule.kind); }},
    {"virtual_stages", [](ValueReader& r, JobSpec& s) { r.integer(s.schedule.virtual_stages, 1); }},
    {"layers_per_stage", [](ValueReader& r, JobSpec& s) { r.integer_list(s.schedule.layers_per_stage, 1); }},
    {"max_in_flight", [](ValueReader& r, JobSpec& s) { r.optional_integer(s.schedule.max_in_flight); }},
};
constexpr Section kSchedule{"schedule", kScheduleEntries};

// Far past Transformer Engine's default of 16 and its largest documented 1024.
constexpr SchemaEntry kFp8Entries[] = {
    {"scaling", [](ValueReader& r, JobSpec& s) { r.choice(s.train.fp8.scaling); }},
    {"amax_history", [](ValueReader& r, JobSpec& s) { r.integer(s.train.fp8.amax_history, 1, 4096); }},
};
constexpr Section kFp8{"train.fp8", kFp8Entries};

constexpr SchemaEntry kTrainEntries[] = {
    {"steps", [](ValueReader& r, JobSpec& s) { r.integer(s.train.steps, 1); }},
    {"global_batch", [](ValueReader& r, JobSpec& s) { r.integer(s.train.global_batch, 1); }},
    {"micro_batch", [](ValueReader& r, JobSpec& s) { r.integer(s.train.micro_batch, 1); }},
    {"precision", [](ValueReader& r, JobSpec& s) { r.choice(s.train.precision); }},
    {"grad_reduce",
     [](ValueReader& r, JobSpec& s) {
       static constexpr Precision kReduced[] = {Precision::Fp32, Precision::Bf16};  // never fp8
       r.choice(s.train.grad_reduce, std::span<const Precision>(kReduced));
     }},
    {"recompute", [](ValueReader& r, JobSpec& s) { r.choice(s.train.recompute); }},
    {"seed", [](ValueReader& r, JobSpec& s) { r.integer(s.train.seed, 0); }},
    {"grad_clip",
     [](ValueReader& r, JobSpec& s) { r.number(s.train.grad_clip, NumberRange::non_negative()); }},
    {"fp8", nullptr, &kFp8},
};
constexpr Section kTrain{"train", kTrainEntries};

constexpr SchemaEntry kOptimizerEntries[] = {
    {"kind", [](ValueReader& r, JobSpec& s) { r.choice(s.optimizer.kind); }},
    {"lr", [](ValueReader& r, JobSpec& s) { r.number(s.optimizer.lr, NumberRange::positive()); }},
    {"min_lr", [](ValueReader& r, JobSpec& s) { r.number(s.optimizer.min_lr, NumberRange::non_negative()); }},
    {"betas",
     [](ValueReader& r, JobSpec& s) {
       r.number_pair(s.optimizer.betas, NumberRange::unit_half_open(), "beta1, beta2");
     }},
    {"eps", [](ValueReader& r, JobSpec& s) { r.number(s.optimizer.eps, NumberRange::positive()); }},
    {"weight_decay",
     [](ValueReader& r, JobSpec& s) { r.number(s.optimizer.weight_decay, NumberRange::non_negative()); }},
    {"warmup_steps", [](ValueReader& r, JobSpec& s) { r.integer(s.optimizer.warmup_steps, 0); }},
    {"decay", [](ValueReader& r, JobSpec& s) { r.choice(s.optimizer.decay); }},
    {"decay_steps", [](ValueReader& r, JobSpec& s) { r.integer(s.optimizer.decay_steps, 0); }},
};
constexpr Section kOptimizer{"optimizer", kOptimizerEntries};

constexpr SchemaEntry kDataEntries[] = {
    {"format", [](ValueReader& r, JobSpec& s) { r.choice(s.data.format); }},
    {"train", [](ValueReader& r, JobSpec& s) { r.text(s.data.train, true); }},
    {"valid", [](ValueReader& r, JobSpec& s) { r.text(s.data.valid, true); }},
    {"eval_every", [](ValueReader& r, JobSpec& s) { r.integer(s.data.eval_every, 0); }},
    {"shuffle", [](ValueReader& r, JobSpec& s) { r.boolean(s.data.shuffle); }},
};
constexpr Section kData{"data", kDataEntries};

constexpr SchemaEntry kCheckpointEntries[] = {
    {"dir", [](ValueReader& r, JobSpec& s) { r.text(s.checkpoint.dir, true); }},
    {"every", [](ValueReader& r, JobSpec& s) { r.integer(s.checkpoint.every, 0); }},
    {"keep", [](ValueReader& r, JobSpec& s) { r.integer(s.checkpoint.keep, 0); }},
    {"resume", [](ValueReader& r, JobSpec& s) { r.choice(s.checkpoint.resume); }},
    {"load_hf", [](ValueReader& r, JobSpec& s) { r.text(s.checkpoint.load_hf, true); }},
    {"async", [](ValueReader& r, JobSpec& s) { r.boolean(s.checkpoint.async); }},
};
constexpr Section kCheckpoint{"checkpoint", kCheckpointEntries};

constexpr SchemaEntry kClusterEntries[] = {
    {"nodes", [](ValueReader& r, JobSpec& s) { r.integer(s.cluster.nodes, 1); }},
    {"gpus_per_node", [](ValueReader& r, JobSpec& s) { r.integer(s.cluster.gpus_per_node, 1); }},
    {"gpu", [](ValueReader& r, JobSpec& s) { r.text(s.cluster.gpu, false); }},
    {"profile", [](ValueReader& r, JobSpec& s) { r.text(s.cluster.profile, true); }},
    {"host_memory_gb",
     [](ValueReader& r, JobSpec& s) { r.optional_number(s.cluster.host_memory_gb, NumberRange::positive()); }},
};
constexpr Section kCluster{"cluster", kClusterEntries};

constexpr SchemaEntry kLoggingEntries[] = {
    {"every", [](ValueReader& r, JobSpec& s) { r.integer(s.logging.every, 1); }},
    {"metrics", [](ValueReader& r, JobSpec& s) { r.text(s.logging.metrics, true); }},
    {"trace", [](ValueReader& r, JobSpec& s) { r.text(s.logging.trace, true); }},
    {"tensorboard", [](ValueReader& r, JobSpec& s) { r.text(s.logging.tensorboard, true); }},
    {"straggler_ratio",
     [](ValueReader& r, JobSpec& s) { r.number(s.logging.straggler_ratio, NumberRange{{1, false}, std::nullopt}); }},
    {"straggler_steps", [](ValueReader& r, JobSpec& s) { r.integer(s.logging.straggler_steps, 1); }},
};
constexpr Section kLogging{"logging", kLoggingEntries};

constexpr SchemaEntry kCommEntries[] = {
    // At least a second: below that the ranks time out before they have met (1e-9 passed validate
    // and ended every multi-rank run at once, exit 1).
    {"timeout_s",
     [](ValueReader& r, JobSpec& s) {
       r.number(s.comm.timeout_s, NumberRange{{1, true}, NumberRange::Bound{kMaxTimeoutSeconds, true}});
     }},
};
constexpr Section kComm{"comm", kCommEntries};

constexpr SchemaEntry kRootEntries[] = {
    {"name", [](ValueReader& r, JobSpec& s) { r.text(s.name, false); }},
    {"backend", [](ValueReader& r, JobSpec& s) { r.choice(s.backend); }},
    {"model", nullptr, &kModel},
    {"parallel", nullptr, &kParallel},
    {"schedule", nullptr, &kSchedule},
    {"train", nullptr, &kTrain},
    {"optimizer", nullptr, &kOptimizer},
    {"data", nullptr, &kData},
    {"checkpoint", nullptr, &kCheckpoint},
    {"cluster", nullptr, &kCluster},
    {"logging", nullptr, &kLogging},
    {"comm", nullptr, &kComm},
};
constexpr Section kRoot{"", kRootEntries};

void collect_paths_named(const Section& section, std::string_view name, std::vector<std::string>& out) {
  for (const SchemaEntry& entry : section.entries) {
    if (entry.name == name) out.push_back(child_path(section.path, entry.name));
    if (entry.section != nullptr) collect_paths_named(*entry.section, name, out);
  }
}

}  // namespace

const Section& root_section() {
  return kRoot;
}

const SchemaEntry* find_entry(const Section& section, std::string_view name) {
  for (const SchemaEntry& entry : section.entries) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::vector<std::string> entry_names(const Section& section) {
  std::vector<std::string> names;
  for (const SchemaEntry& entry : section.entries) names.emplace_back(entry.name);
  return names;
}

std::vector<std::string> paths_named(std::string_view name) {
  std::vector<std::string> paths;
  collect_paths_named(kRoot, name, paths);
  return paths;
}

std::string child_path(std::string_view parent, std::string_view name) {
  if (parent.empty()) return std::string(name);
  std::string path(parent);
  path += '.';
  path += name;
  return path;
}

}  // namespace ptrain::config
