#include "engine/config/fp8_cuda.h"
#include "engine/config/rules.h"
#include "engine/config/text.h"

namespace ptrain::config {
namespace {

void check_optimizer(LoadContext& ctx) {
  const OptimizerSpec& o = ctx.spec().optimizer;
  const std::int64_t steps = ctx.spec().train.steps;
  if (!ctx.any_bad({"optimizer.lr", "optimizer.min_lr"}) && o.min_lr > o.lr) {
    ctx.error("optimizer.min_lr", cat("optimizer.min_lr = ", o.min_lr, " must be <= optimizer.lr = ", o.lr),
              cat("use min_lr <= ", o.lr, " (commonly lr/10)"));
  }
  if (!ctx.any_bad({"optimizer.warmup_steps", "train.steps"}) && o.warmup_steps > steps) {
    ctx.warning("optimizer.warmup_steps",
                cat("optimizer.warmup_steps = ", o.warmup_steps, " > train.steps = ", steps,
                    ": the learning rate never reaches optimizer.lr"),
                cat("use warmup_steps <= ", steps));
  }
  if (ctx.any_bad({"optimizer.decay", "optimizer.decay_steps", "optimizer.warmup_steps", "train.steps"}))
    return;
  if (o.decay != LrDecay::Wsd && o.decay_steps > 0) {
    ctx.warning("optimizer.decay_steps",
                cat("only decay: wsd uses optimizer.decay_steps; decay: ", to_string(o.decay), " ignores it"),
                "remove decay_steps, or set optimizer.decay: wsd");
  }
  if (o.decay == LrDecay::Constant && ctx.was_written("optimizer.min_lr") && !ctx.any_bad({"optimizer.min_lr"})) {
    ctx.warning("optimizer.min_lr", "decay: constant keeps optimizer.lr after the warm-up and ignores min_lr",
                "remove min_lr, or set optimizer.decay: cosine, linear or wsd");
  }
  // Written as two comparisons: warmup_steps + decay_steps can overflow.
  if (o.decay == LrDecay::Wsd && o.warmup_steps <= steps && o.decay_steps > steps - o.warmup_steps) {
    ctx.warning("optimizer.decay_steps",
                cat("warmup_steps + decay_steps = ", o.warmup_steps, " + ", o.decay_steps,
                    " > train.steps = ", steps, ": the stable phase is empty and the decay is cut short"),
                "lower optimizer.decay_steps");
  }
}

void check_data(LoadContext& ctx) {
  const DataSpec& d = ctx.spec().data;
  if (ctx.any_bad({"data.format", "data.train"})) return;
  if (d.format != DataFormat::Synthetic && d.train.empty()) {
    const char* what = d.format == DataFormat::Llmc ? "a glob of llm.c .bin token shards"
                                                    : "the path prefix of a Megatron .bin/.idx pair";
    ctx.error("data.train", cat("data.format ", to_string(d.format), " needs data.train (", what, ")"),
              "set data.train, or use data.format: synthetic");
  }
  if (d.format == DataFormat::Synthetic && !d.train.empty()) {
    ctx.warning("data.train", "is ignored with data.format: synthetic",
                "remove data.train, or set data.format");
  }
  if (ctx.any_bad({"data.eval_every", "data.valid"})) return;
  if (d.eval_every > 0 && d.valid.empty()) {
    ctx.warning("data.eval_every",
                cat("data.eval_every = ", d.eval_every, " but data.valid is not set: no evaluation will run"),
                "set data.valid, or data.eval_every: 0");
  }
  if (d.eval_every == 0 && !d.valid.empty()) {
    ctx.warning("data.valid", "is set but data.eval_every is 0, so it is never evaluated",
                "set data.eval_every, e.g. 100");
  }
}

void check_checkpoint(LoadContext& ctx) {
  const CheckpointSpec& c = ctx.spec().checkpoint;
  if (ctx.any_bad({"checkpoint.every", "checkpoint.dir"})) return;
  if (c.every > 0 && c.dir.empty()) {
    ctx.warning(
        "checkpoint.every",
        cat("checkpoint.every = ", c.every, " but checkpoint.dir is not set: no checkpoints are written"),
        "set checkpoint.dir");
  }
}

void check_precision(LoadContext& ctx) {
  const TrainSpec& t = ctx.spec().train;
  if (ctx.any_bad({"train.precision", "train.grad_reduce"})) return;
  if (t.grad_reduce == Precision::Bf16 && t.precision == Precision::Fp32) {
    ctx.error("train.grad_reduce",
              "train.grad_reduce: bf16 needs train.precision: bf16 or fp8 (an fp32 run reduces in fp32)",
              "remove train.grad_reduce, or set train.precision: bf16");
  }
  if (t.precision != Precision::Fp8) {
    for (const char* key : {"train.fp8", "train.fp8.scaling", "train.fp8.amax_history"})
      if (ctx.was_written(key)) {
        ctx.warning(key, cat(key, " is read under train.precision: fp8 only, and the job's is ",
                             to_string(t.precision), ": it is ignored"),
                    "remove it, or set train.precision: fp8");
        break;
      }
  } else if (t.fp8.scaling == Fp8Scaling::Current && ctx.was_written("train.fp8.amax_history")) {
    ctx.warning("train.fp8.amax_history", "train.fp8.amax_history is read under scaling: delayed only: ignored",
                "remove it, or set train.fp8.scaling: delayed");
  }
  // On a GPU, shapes cuBLASLt's FP8 GEMMs cannot take (a backend: auto job is checked by `run` once
  // it has resolved to a GPU).
  if (ctx.spec().backend == Backend::Cuda &&
      !ctx.any_bad({"model.hidden", "model.heads", "model.kv_heads", "model.ffn_hidden", "model.seq_len",
                    "train.micro_batch", "parallel.tp", "parallel.cp"}))
    if (const std::optional<Fp8CudaRefusal> refused = fp8_shape_refusal(ctx.spec()))
      ctx.error(refused->key, refused->reason, refused->fix);
}

}  // namespace

void check_training(LoadContext& ctx) {
  check_precision(ctx);
  check_optimizer(ctx);
  check_data(ctx);
  check_checkpoint(ctx);
}

}  // namespace ptrain::config
