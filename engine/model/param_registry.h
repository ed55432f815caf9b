// The parameter registry: every tensor of a model, by HF name, with its global shape and how it is
// split across a layout. Pure: `validate` counts it and the engine allocates from it, so the dry
// run cannot drift from the run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace ptrain::model {

enum class Placement { Embedding, Layer, FinalNorm, Head };  // which pipeline stage holds it

struct ParamInfo {
  std::string name;                 // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;  // global shape, ptrain layout ([out, in] for linear weights)
  Placement placement = Placement::Layer;
  int layer = -1;                   // transformer layer index for Placement::Layer, else -1
  int tp_dim = -1;                  // dimension split across tp (-1 = replicated on tp ranks)
  int tp_fused_parts = 1;           // >1: the tp_dim holds this many parts (gpt2 c_attn: q,k,v) sliced separately
  int expert = -1;                  // MoE expert index, -1 for dense
  bool weight_decay = true;         // false for norms and biases
  bool sequence_parallel_grad = false;  // replicated on tp but reduced over tp under SP (norm weights)
  std::int64_t numel() const;
};

// All parameters of the model, in a fixed order (embedding, layers 0..L-1, final norm, head).
// Uses model.padded_vocab (vocab rounded up to a multiple of tp).
std::vector<ParamInfo> build_registry(const config::ModelSpec& model);

// Where a rank sits, as far as parameter placement is concerned.
struct ShardCoords {
  int tp_rank = 0, tp = 1;
  int ep_rank = 0, ep = 1;
  int pp_rank = 0, pp = 1, vpp = 1;
  std::vector<int> layers_per_stage;  // per virtual stage (chunk*pp + pp_rank); empty = all layers on one stage
  bool tie_embeddings = false;        // the head reuses the embedding (gpt2, or llama with tie_embeddings)
};

struct LocalParam {
  const ParamInfo* info;
  std::vector<std::int64_t> local_shape;  // this rank's slice
  int chunk = 0;                          // model chunk (virtual stage) that holds it on this rank
  std::int64_t numel() const;
};

// The slices of `registry` that live on a rank, in registry order.
std::vector<LocalParam> local_params(const std::vector<ParamInfo>& registry, const ShardCoords& coords);

}  // namespace ptrain::model
