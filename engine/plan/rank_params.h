// What one rank holds of the model, in elements, as the memory and communication models need it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/flat_layout.h"
#include "engine/model/param_registry.h"
#include "engine/pipeline/schedule_model.h"

namespace ptrain::plan {

// Dense elements are counted as the engine's flat buffer holds them (model/flat_layout.h): each tensor
// padded to 16 elements, each unit to a multiple of 16 per ZeRO rank, so that ZeRO's shards and
// buckets are what validate counts. Where the engine trains MoE layers (experts_in_layer_units) the
// experts are in their layers' units and counted as dense.
struct RankParams {
  std::int64_t dense = 0;         // elements ZeRO shards over dp-cp, padded
  std::int64_t expert = 0;  // expert elements apart (ZeRO shards them over expert-dp = tp*cp*dp/ep), padded
  std::int64_t largest_unit = 0;  // the biggest unit of either kind (a bf16 reduction's staging)
  std::int64_t largest_dense_unit = 0, largest_expert_unit = 0;
  // Units of the flat layout (model::FlatLayout) of each kind: ZeRO reduces and gathers each in one call.
  int dense_units = 0, expert_units = 0;
  std::int64_t tied_embedding = 0;  // word-embedding copy whose grad is all-reduced over the embedding group
  // The FP8 linear layers' weights (model::ParamInfo::fp8_linear): their elements (unpadded), and
  // how many GEMM weights they are (GPT-2's c_attn is q's, k's and v's).
  std::int64_t fp8_linear = 0, fp8_linear_weights = 0;
  // The unit of an embedding that is also the head (tied, both on this rank), else 0, and the biggest
  // of the other dense units: ZeRO 2/3 give it a window of its own (zero/data_parallel.h).
  std::int64_t tied_unit = 0, largest_other_unit = 0;
  // Under ZeRO-3 (counted wherever the units are sharded): the elements the rank's step gathers, and
  // in how many all-gathers (zero3_gathers.h), of the dense units and of the experts' units apart.
  std::int64_t zero3_gathered = 0, zero3_gather_calls = 0;
  std::int64_t zero3_expert_gathered = 0, zero3_expert_gather_calls = 0;
  std::int64_t total() const { return dense + expert; }
  // Elements of ZeRO 2/3's windows: two alternating ones of the biggest dense unit, or the tied
  // unit's own plus two of the biggest other one; two more of the biggest experts' unit apart.
  std::int64_t window_elements() const {
    return (tied_unit > 0 ? tied_unit + 2 * largest_other_unit : 2 * largest_dense_unit) +
           2 * largest_expert_unit;
  }
};

// Elements whose optimizer state this rank keeps and updates: all of them at ZeRO 0, else its shards
// (dense over dp*cp, the experts over expert-dp = tp*cp*dp/ep).
double updated_elements(const config::JobSpec& spec, const RankParams& params);

// Whether a layout's experts live in their layers' units of the flat buffer, sharded and reduced
// over dp-cp with the dense tensors: ep = tp = 1 (expert-dp is then the dp-cp group). Under expert
// parallelism they are apart, a unit per layer sharded over expert-dp (model::experts_apart), and
// so are they modelled for tp > 1 with ep = 1, which the engine does not run.
bool experts_in_layer_units(const config::ParallelSpec& parallel);

// Precondition: `local` is local_params(...) of a rank at pipeline rank `pp_rank` of `spec`'s layout
// (ZeRO shards its dense parameters over dp * cp ranks), `schedule` the layout's.
RankParams count_rank_params(const config::JobSpec& spec, const pipeline::ScheduleModel& schedule,
                             const std::vector<model::LocalParam>& local, int pp_rank);

}  // namespace ptrain::plan
