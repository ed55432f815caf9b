// The parameter registry: every tensor of a model, by HF name, with its global shape and how it is
// split across a layout. Pure: `validate` counts it and the engine allocates from it, so the dry
// run cannot drift from the run.
//
// Shapes are in ptrain layout, [out, in] for linear weights (HF GPT-2 stores Conv1D weights as
// [in, out]; the converter transposes them). Tensor parallelism (Megatron):
//  - column-parallel weights split dim 0 (q/k/v, gate/up, c_attn, c_fc) with their biases;
//  - row-parallel weights split dim 1 (o_proj, down_proj, c_proj); their biases are replicated;
//  - embeddings and the LM head are vocab-parallel (dim 0 over the padded vocabulary);
//  - norms, row-parallel biases and the MoE router are replicated; under sequence parallelism the
//    norms' and the router's gradients are partial sums over the tp group (sequence_parallel_grad),
//    the biases' whole (one tp rank adds them before the sum over tp);
//  - experts are not tp-split (expert tensor parallel = 1): ep rank e holds experts
//    [e*E/ep, (e+1)*E/ep) of every MoE layer.
// Heads are never split: a k/v projection with fewer kv heads than tp ranks is replicated head-wise
// (Megatron): tp rank r holds kv head r / (tp / kv_heads), so local kv rows = max(kv_heads/tp, 1)*d.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/config/stage_placement.h"

namespace ptrain::model {

enum class Placement { Embedding, Layer, FinalNorm, Head };  // which pipeline stage holds it

struct ParamInfo {
  std::string name;                 // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;  // global shape, ptrain layout ([out, in] for linear weights)
  Placement placement = Placement::Layer;
  int layer = -1;            // transformer layer index for Placement::Layer, else -1
  int tp_dim = -1;           // dimension split across tp (-1 = replicated on tp ranks)
  int tp_fused_parts = 1;    // >1: the tp_dim holds this many parts (gpt2 c_attn: q,k,v) sliced separately
  std::int64_t tp_unit = 1;  // tp splits tp_dim in whole units of this many rows (a head: head_dim)
  int expert = -1;           // MoE expert index, -1 for dense
  bool weight_decay = true;  // false for norms and biases
  bool sequence_parallel_grad = false;  // replicated on tp but reduced over tp under SP (norm weights)
  bool tied_head = false;               // the word embedding, which the LM head reuses (gpt2, tie_embeddings)
  // The weight of an FP8 linear layer under train.precision fp8 (model/block_linears.h): attention's
  // and the MLP's, the experts'; not the router's, the embeddings' or the head's.
  bool fp8_linear = false;
  bool is_matmul() const;  // a GEMM weight: 2-D and not an embedding lookup (the tied head counts)
  std::int64_t numel() const;
};

// All parameters of the model, in a fixed order (embedding, layers 0..L-1, final norm, head).
// Precondition: the derived fields of `model` are filled (config::load): padded_vocab (vocab rounded
// up to a multiple of tp), kv_heads, ffn_hidden; moe present for mixtral.
std::vector<ParamInfo> build_registry(const config::ModelSpec& model);

// The shape of one tp rank's slice of `info` (experts and replicated tensors: the global shape).
std::vector<std::int64_t> local_shape(const ParamInfo& info, int tp);

struct RowRange {  // rows [begin, begin + length) of the global tensor along tp_dim
  std::int64_t begin = 0, length = 0;
};
// The rows of `info` along tp_dim that tp rank `tp_rank` holds, in the order they are stored locally
// (one range per fused part). Replicated tensors: the whole dimension 0.
std::vector<RowRange> tp_row_ranges(const ParamInfo& info, int tp_rank, int tp);

// Calls fn(global_start, length) for every contiguous block of global flat indices that tp rank
// `tp_rank` holds of `info`, in its local storage order: whole rows of dim 0 (replicated: all of
// them), or, split along dim 1 of a 2-D weight, a range of columns of every row.
template <typename Fn>
void for_each_tp_block(const ParamInfo& info, int tp_rank, int tp, Fn&& fn) {
  const std::vector<RowRange> ranges = tp_row_ranges(info, tp_rank, tp);
  if (info.tp_dim <= 0) {
    std::int64_t cols = 1;  // elements per row of dim 0
    for (std::size_t d = 1; d < info.shape.size(); ++d) cols *= info.shape[d];
    for (const RowRange& r : ranges) fn(r.begin * cols, r.length * cols);
  } else {
    for (std::int64_t row = 0; row < info.shape[0]; ++row)
      for (const RowRange& r : ranges) fn(row * info.shape[1] + r.begin, r.length);
  }
}

// The blocks for_each_tp_block gives, cut to the rank's local elements [lo, hi), as runs: `rows`
// blocks of `cols` elements, back to back locally from `local`, whose global flat indices start at
// `global` and step by `stride` a block (a split along dim 1: one run per fused part, not one block per
// row). Drawing a tensor by runs is drawing it block by block.
struct TpBlockRun {
  std::int64_t local = 0, rows = 1, cols = 0, global = 0, stride = 0;
};
std::vector<TpBlockRun> tp_block_runs(const ParamInfo& info, int tp_rank, int tp, std::int64_t lo, std::int64_t hi);

// Whether tp rank `tp_rank`'s slice of `info` is the first copy of its elements: every rank's of a
// split tensor, tp rank 0's of a replicated one, the lowest sharer's of a kv head shared by several
// ranks. A sum over the tp group counts each element once by adding first copies only.
bool first_tp_copy(const ParamInfo& info, int tp_rank, int tp);

// Where a rank sits, as far as parameter placement is concerned.
struct ShardCoords {
  int tp_rank = 0, tp = 1;
  int ep_rank = 0, ep = 1;
  int pp_rank = 0, pp = 1, vpp = 1;
  bool v_shape = false;  // the schedule's placement of stages (config/stage_placement.h)
  std::vector<int>
      layers_per_stage;  // per virtual stage, in stage order; empty = all layers on one stage

  config::StagePlacement placement() const { return {pp, vpp, v_shape}; }
};

// The coordinates of a rank at (pp_rank, tp_rank, ep_rank) in a loaded job.
ShardCoords shard_coords(const config::JobSpec& spec, int pp_rank, int tp_rank, int ep_rank);
// Whether the rank holds a chunk that is not the last virtual stage, whose output it sends on (and
// keeps until it is sent).
bool sends_stage_output(const ShardCoords& coords);

struct LocalParam {
  const ParamInfo* info;
  std::vector<std::int64_t> local_shape;  // this rank's slice
  int chunk = 0;                          // model chunk (virtual stage) that holds it on this rank
  std::int64_t numel() const;
};

// The slices of `registry` that live on a rank, in registry order. Layers go to virtual stages in
// order (virtual stage v holds the next layers_per_stage[v] layers; which rank and chunk hold v is
// the schedule's placement); the embeddings sit on virtual stage 0, the final norm and head on the
// last one.
// With a tied head and pp > 1 the last stage also holds a copy of the word embedding (Megatron:
// the first and last stage all-reduce its gradient over the embedding group).
std::vector<LocalParam> local_params(const std::vector<ParamInfo>& registry, const ShardCoords& coords);

}  // namespace ptrain::model
