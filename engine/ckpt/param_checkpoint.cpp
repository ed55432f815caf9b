#include "engine/ckpt/param_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/index_runs.h"

namespace ptrain::ckpt {
namespace {

constexpr const char* kOptimPrefix = "optim/";

// A vocab-parallel [padded_vocab, hidden] table, whose padding rows depend on the layout's tp.
bool vocab_padded(const model::ParamInfo& info) {
  return info.tp_dim == 0 && info.shape.size() == 2 &&
         (info.placement == model::Placement::Embedding || info.placement == model::Placement::Head);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return nlohmann::json(shape).dump();
}

// The part [begin, end) of a slot's local elements that lies in the flat range [lo, hi).
struct LocalSpan {
  std::int64_t begin = 0, end = 0;
  bool empty() const { return begin >= end; }
};
LocalSpan overlap(const model::ParamSlot& slot, std::int64_t lo, std::int64_t hi) {
  return {std::max(lo, slot.offset) - slot.offset, std::min(hi, slot.offset + slot.numel) - slot.offset};
}

class Restorer {
 public:
  explicit Restorer(LoadedCheckpoint& ckpt) : ckpt_(ckpt) {
    const nlohmann::json& job = ckpt.job_meta();
    if (job.contains("model") && job["model"].is_object() && job["model"].contains("vocab") &&
        job["model"]["vocab"].is_number_integer())
      vocab_ = job["model"]["vocab"].get<std::int64_t>();
  }

  // Records a problem with tensor `name` for `info` (missing or wrong shape); true if it can be read.
  bool check(const std::string& name, const model::ParamInfo& info) {
    if (!ckpt_.has_tensor(name)) {
      missing_.push_back(name);
      return false;
    }
    const std::vector<std::int64_t>& shape = ckpt_.tensor_shape(name);
    if (shape == info.shape) return true;
    if (vocab_padded(info) && shape.size() == 2 && shape[1] == info.shape[1] && vocab_ > 0 &&
        std::min(shape[0], info.shape[0]) >= vocab_)
      return true;
    mismatched_.push_back(name + ": the checkpoint has " + shape_text(shape) + ", this model needs " +
                          shape_text(info.shape));
    return false;
  }

  void throw_if_problems() const {
    if (missing_.empty() && mismatched_.empty()) return;
    std::string message;
    auto list = [&](const char* title, const std::vector<std::string>& items) {
      if (items.empty()) return;
      message +=
          std::string(message.empty() ? "" : "; ") + title + " (" + std::to_string(items.size()) + "): ";
      for (std::size_t i = 0; i < items.size() && i < 10; ++i) message += (i ? ", " : "") + items[i];
      if (items.size() > 10) message += ", ... and " + std::to_string(items.size() - 10) + " more";
    };
    list("missing tensors", missing_);
    list("shape mismatches", mismatched_);
    throw CheckpointError(ckpt_.path(), "does not fit this model: " + message);
  }

  // Reads the global elements `runs` of tensor `name`; rows past the checkpoint's padded vocab
  // read as zeros.
  void read(const std::string& name, const IndexRuns& runs, float* out) {
    const std::vector<std::int64_t>& shape = ckpt_.tensor_shape(name);
    std::int64_t saved = 1;
    for (std::int64_t d : shape) saved *= d;
    bool inside = true;
    for_each_block(runs, [&](std::int64_t start, std::int64_t length, std::int64_t) {
      inside = inside && start + length <= saved;
    });
    ++tensors_read_;
    if (inside) return ckpt_.read_tensor(name, runs, out);
    for_each_block(runs, [&](std::int64_t start, std::int64_t length, std::int64_t position) {
      const std::int64_t kept = std::clamp<std::int64_t>(saved - start, 0, length);
      if (kept > 0) ckpt_.read_tensor(name, IndexRuns{{start, kept, 0, 1}}, out + position);
      std::fill(out + position + kept, out + position + length, 0.0f);
    });
  }

  std::int64_t tensors_read() const { return tensors_read_; }

 private:
  LoadedCheckpoint& ckpt_;
  std::int64_t vocab_ = -1;
  std::vector<std::string> missing_, mismatched_;
  std::int64_t tensors_read_ = 0;
};

bool has_optimizer_state(const LoadedCheckpoint& ckpt) {
  for (const std::string& name : ckpt.tensor_names())
    if (name.rfind(kOptimPrefix, 0) == 0) return true;
  return false;
}

}  // namespace

std::string model_tensor_name(const std::string& param) {
  return "model/" + param;
}
std::string exp_avg_tensor_name(const std::string& param) {
  return "optim/exp_avg/" + param;
}
std::string exp_avg_sq_tensor_name(const std::string& param) {
  return "optim/exp_avg_sq/" + param;
}

namespace {

// One parameter's elements inside one shard: where they sit in the parameter (span), which global
// elements they are (runs) and their offset in the shard's buffers (at).
struct Piece {
  const FlatShard& shard;
  const model::ParamSlot& slot;
  LocalSpan span;
  IndexRuns runs;
  std::int64_t at = 0;
  const model::ParamInfo& info() const { return *slot.local.info; }
  bool whole() const { return span.begin == 0 && span.end == slot.numel; }
};

template <typename Fn>
void for_each_piece(const model::ParamStore& store, const std::vector<FlatShard>& shards, Fn&& fn) {
  const model::ShardCoords& c = store.coords();
  for (const FlatShard& shard : shards) {
    for (const model::ParamSlot& slot : store.slots()) {
      const LocalSpan span = overlap(slot, shard.range.begin, shard.range.end);
      if (span.empty()) continue;
      const IndexRuns all = param_runs(*slot.local.info, c.tp_rank, c.tp);
      const bool whole = span.begin == 0 && span.end == slot.numel;
      fn(Piece{shard, slot, span, whole ? all : slice_runs(all, span.begin, span.end - span.begin),
               slot.offset + span.begin - shard.range.begin});
    }
  }
}

}  // namespace

std::vector<TensorShard> flat_shard_tensors(const model::ParamStore& store, const std::vector<FlatShard>& shards) {
  std::vector<TensorShard> out;
  const model::ShardCoords& at = store.coords();
  for_each_piece(store, shards, [&](const Piece& p) {
    const model::ParamInfo& info = p.info();
    // A dense unit is sharded over dp-cp, so a tensor replicated over tp is in every tp rank's shard:
    // its first copy writes it. An expert's unit is sharded over the ranks holding the same experts,
    // tp ranks among them: each rank's chunk is its own (and with ep = tp, so are its experts).
    if (info.expert < 0 && !model::first_tp_copy(info, at.tp_rank, at.tp)) return;
    const std::vector<std::int64_t> stored = p.whole() ? p.slot.local.local_shape : std::vector<std::int64_t>{};
    auto add = [&](const float* buffer, const std::string& name) {
      if (buffer != nullptr) out.push_back({name, info.shape, stored, p.runs, buffer + p.at});
    };
    add(p.shard.params, model_tensor_name(info.name));
    add(p.shard.exp_avg, exp_avg_tensor_name(info.name));
    add(p.shard.exp_avg_sq, exp_avg_sq_tensor_name(info.name));
  });
  return out;
}

RestoreResult restore_flat_shards(LoadedCheckpoint& ckpt, const model::ParamStore& store,
                                  const std::vector<FlatShard>& shards) {
  Restorer restorer(ckpt);
  const bool with_optim = has_optimizer_state(ckpt);
  // Only a step 0 (a conversion: convert --to) comes without AdamW's moments; a trained step without
  // them (a damaged or edited manifest) would go on with moments restarted from zero, silently.
  const bool wants_moments = std::any_of(shards.begin(), shards.end(), [](const FlatShard& s) {
    return s.exp_avg != nullptr || s.exp_avg_sq != nullptr;
  });
  if (wants_moments && !with_optim && ckpt.step() > 0)
    throw CheckpointError(ckpt.path(), "is step " + std::to_string(ckpt.step()) + " of a run but holds no optimizer "
                                       "state (optim/ tensors): resuming would restart AdamW's moments from zero "
                                       "(fix: resume from another step, or convert its weights to a step 0)");
  for_each_piece(store, shards, [&](const Piece& p) {
    const model::ParamInfo& info = p.info();
    if (p.shard.params != nullptr) restorer.check(model_tensor_name(info.name), info);
    if (with_optim && p.shard.exp_avg != nullptr) restorer.check(exp_avg_tensor_name(info.name), info);
    if (with_optim && p.shard.exp_avg_sq != nullptr) restorer.check(exp_avg_sq_tensor_name(info.name), info);
  });
  restorer.throw_if_problems();

  for_each_piece(store, shards, [&](const Piece& p) {
    const model::ParamInfo& info = p.info();
    if (p.shard.params != nullptr) restorer.read(model_tensor_name(info.name), p.runs, p.shard.params + p.at);
    auto moment = [&](float* buffer, const std::string& name) {
      if (buffer == nullptr) return;
      if (with_optim) restorer.read(name, p.runs, buffer + p.at);
      else std::fill(buffer + p.at, buffer + p.at + (p.span.end - p.span.begin), 0.0f);
    };
    moment(p.shard.exp_avg, exp_avg_tensor_name(info.name));
    moment(p.shard.exp_avg_sq, exp_avg_sq_tensor_name(info.name));
  });
  return {restorer.tensors_read(), with_optim};
}

FlatShard whole_store(const model::ParamStore& store, float* exp_avg, float* exp_avg_sq) {
  return {{0, store.numel()}, store.params(), exp_avg, exp_avg_sq};
}

namespace {

// What the learning rate, the update and the samples depend on beyond the model and their order:
// recorded so that a resume can say what changed (training_changes).
nlohmann::json training_settings(const config::JobSpec& spec) {
  const config::OptimizerSpec& o = spec.optimizer;
  return {{"train", {{"steps", spec.train.steps}, {"global_batch", spec.train.global_batch},
                     {"grad_clip", spec.train.grad_clip}}},
          {"optimizer", {{"lr", o.lr}, {"min_lr", o.min_lr}, {"betas", o.betas}, {"eps", o.eps},
                         {"weight_decay", o.weight_decay}, {"warmup_steps", o.warmup_steps},
                         {"decay", config::to_string(o.decay)}, {"decay_steps", o.decay_steps}}},
          {"data", {{"format", config::to_string(spec.data.format)}, {"train", spec.data.train},
                    {"valid", spec.data.valid}}}};
}

}  // namespace

nlohmann::json job_meta(const config::JobSpec& spec) {
  const config::ModelSpec& m = spec.model;
  nlohmann::json model = {{"arch", config::to_string(m.arch)},
                          {"layers", m.layers},
                          {"hidden", m.hidden},
                          {"heads", m.heads},
                          {"kv_heads", m.kv_heads},
                          {"ffn_hidden", m.ffn_hidden},
                          {"vocab", m.vocab},
                          {"padded_vocab", m.padded_vocab},
                          {"seq_len", m.seq_len},
                          {"norm_eps", m.norm_eps},
                          {"rope_theta", m.rope_theta},
                          {"tie_embeddings", m.tie_embeddings},
                          {"moe", nullptr}};
  if (m.moe)
    model["moe"] = {{"experts", m.moe->experts},
                    {"top_k", m.moe->top_k},
                    {"capacity_factor", m.moe->capacity_factor},
                    {"aux_loss_coef", m.moe->aux_loss_coef}};
  const config::ParallelSpec& p = spec.parallel;
  return {{"name", spec.name},
          {"model", std::move(model)},
          {"precision", config::to_string(spec.train.precision)},
          {"seed", spec.train.seed},
          {"shuffle", spec.data.shuffle},
          {"training", training_settings(spec)},
          {"layout",
           {{"tp", p.tp},
            {"pp", p.pp},
            {"dp", p.dp},
            {"cp", p.cp},
            {"ep", p.ep},
            {"zero", p.zero},
            {"world", spec.world},
            {"virtual_stages", spec.schedule.virtual_stages},
            {"sequence_parallel", p.sequence_parallel},
            {"order", p.order}}}};
}

namespace {

// "<prefix><key>: the checkpoint has X, the job has Y" where the saved value at `key` of the object
// `saved` differs from `ours`; a missing one counts as null (with `missing_agrees`, as the same).
void compare_saved(std::vector<std::string>& out, const nlohmann::json& saved, const std::string& prefix, const char* key,
                   const nlohmann::json& ours, bool missing_agrees = false) {
  const bool present = saved.is_object() && saved.contains(key);
  if (!present && missing_agrees) return;
  const nlohmann::json theirs = present ? saved[key] : nlohmann::json();
  if (theirs != ours) out.push_back(prefix + key + ": the checkpoint has " + theirs.dump() + ", the job has " + ours.dump());
}

const nlohmann::json& saved_moe(const nlohmann::json& saved) {
  static const nlohmann::json none;
  return saved.contains("moe") ? saved["moe"] : none;
}

}  // namespace

std::vector<std::string> model_mismatches(const nlohmann::json& job_meta, const config::ModelSpec& model) {
  if (!job_meta.is_object() || !job_meta.contains("model") || !job_meta["model"].is_object())
    return {"the checkpoint records no model"};
  const nlohmann::json& saved = job_meta["model"];
  std::vector<std::string> out;
  auto compare = [&](const char* key, const nlohmann::json& ours) { compare_saved(out, saved, "model.", key, ours); };
  compare("arch", config::to_string(model.arch));
  compare("layers", model.layers);
  compare("hidden", model.hidden);
  compare("heads", model.heads);
  compare("kv_heads", model.kv_heads);
  compare("ffn_hidden", model.ffn_hidden);
  compare("vocab", model.vocab);
  compare("tie_embeddings", model.tie_embeddings);
  if (model.arch == config::Arch::Gpt2) compare("seq_len", model.seq_len);  // learned positions
  if (model.moe) compare_saved(out, saved_moe(saved), "model.moe.", "experts", model.moe->experts);
  return out;
}

std::vector<std::string> model_changes(const nlohmann::json& job_meta, const config::ModelSpec& model) {
  std::vector<std::string> out;
  if (!job_meta.is_object() || !job_meta.contains("model") || !job_meta["model"].is_object()) return out;
  const nlohmann::json& saved = job_meta["model"];
  auto compare = [&](const char* key, const nlohmann::json& ours) {
    compare_saved(out, saved, "model.", key, ours, true);
  };
  compare("norm_eps", model.norm_eps);
  if (model.arch != config::Arch::Gpt2) {  // rotary positions: the weights take any length and base
    compare("rope_theta", model.rope_theta);
    compare("seq_len", model.seq_len);
  }
  if (model.moe) {
    const nlohmann::json& moe = saved_moe(saved);
    compare_saved(out, moe, "model.moe.", "top_k", model.moe->top_k, true);
    compare_saved(out, moe, "model.moe.", "capacity_factor", model.moe->capacity_factor, true);
    compare_saved(out, moe, "model.moe.", "aux_loss_coef", model.moe->aux_loss_coef, true);
  }
  return out;
}

std::vector<std::string> training_changes(const nlohmann::json& job_meta, const config::JobSpec& spec) {
  std::vector<std::string> out;
  if (!job_meta.is_object() || !job_meta.contains("training") || !job_meta["training"].is_object()) return out;
  const nlohmann::json& saved = job_meta["training"];
  const nlohmann::json ours = training_settings(spec);
  for (auto section = ours.begin(); section != ours.end(); ++section) {
    static const nlohmann::json none;
    const nlohmann::json& theirs = saved.contains(section.key()) ? saved[section.key()] : none;
    for (auto item = section->begin(); item != section->end(); ++item)
      compare_saved(out, theirs, section.key() + ".", item.key().c_str(), *item, true);
  }
  return out;
}

std::vector<std::string> data_order_changes(const nlohmann::json& job_meta, const config::JobSpec& spec) {
  std::vector<std::string> out;
  if (!job_meta.is_object()) return out;
  compare_saved(out, job_meta, "train.", "seed", spec.train.seed, true);
  compare_saved(out, job_meta, "data.", "shuffle", spec.data.shuffle, true);
  return out;
}

std::vector<std::string> resume_messages(const nlohmann::json& job_meta, const config::JobSpec& spec) {
  std::vector<std::string> out;
  for (const std::string& change : model_changes(job_meta, spec.model))
    out.push_back("warning: resuming with another model setting than the checkpoint's: " + change);
  for (const std::string& change : training_changes(job_meta, spec)) {
    // More steps is how a run is extended (what "nothing to train" advises): said, not warned.
    if (change.rfind("train.steps: ", 0) == 0)
      out.push_back("note: resuming with another " + change +
                    " (the learning-rate schedule from here is the job's, laid over its train.steps)");
    else
      out.push_back("warning: resuming with other training settings than the checkpoint's: " + change +
                    " (the run goes on with the job's)");
  }
  for (const std::string& change : data_order_changes(job_meta, spec))
    out.push_back("warning: resuming with another sample order than the checkpoint's: " + change +
                  " (from here some samples repeat and others are skipped)");
  return out;
}

}  // namespace ptrain::ckpt
