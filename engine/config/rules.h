// Cross-field rules and derived values, run after the file and the overrides were read. Each step
// skips the checks whose inputs were rejected (LoadContext::any_bad), so one bad value gives one
// error rather than a cascade; and each resolves the derived fields it owns.
#pragma once

#include <optional>

#include "engine/config/load_context.h"

namespace ptrain::config {

// Bounds that keep later stages (grid tables, per-stage lists) small enough to allocate.
inline constexpr int kMaxWorld = 1 << 20;
inline constexpr int kMaxPipelineStages = 1 << 12;

// world, parallel.dp, parallel.order, sequence_parallel.
void resolve_parallel(LoadContext& ctx, std::optional<int> world);
// Attention heads, kv_heads, ffn_hidden, padded_vocab, seq_len, tie_embeddings.
void resolve_model(LoadContext& ctx);
// model.moe and parallel.ep, then the rank grid (job_grid.h) they and parallel.* give.
void resolve_experts(LoadContext& ctx);
// virtual_stages vs kind, resolved_layers_per_stage, microbatches, ZeRO stages the pipeline allows.
void resolve_schedule(LoadContext& ctx);
// Optimizer, data, checkpoint and logging consistency.
void check_training(LoadContext& ctx);

}  // namespace ptrain::config
