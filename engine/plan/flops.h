// FLOPs of a training step (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", appendix; Chowdhery et al. 2022 for the MFU convention).
//
//   N_matmul = weights that take part in GEMMs per token: every 2-D layer weight, the MoE router,
//              top_k of the E experts, and the LM head (the tied embedding counts as the head);
//              not the embedding lookups, positional tables, norms or biases.
//   attention (causal, per token per layer, forward): QK^T and AV over on average s/2 keys,
//              2 * 2 * (s/2) * a*d = 2*s*a*d
//   model FLOPs/step    = tokens * (6 * N_matmul + 6 * L * s * a*d)      (fwd 1x + bwd 2x)
//   hardware FLOPs/step = model + recomputed forwards: full recompute adds one forward of every
//              layer, tokens * (2 * N_layers + 2 * L * s * a*d); selective recomputes norms and
//              activation functions, elementwise work counted as 0.
//   tokens = global_batch * seq_len.
// Per rank, the work of one microbatch on one virtual stage is split evenly over tp (GEMM slices,
// and for MoE each tp rank routes 1/tp of the tokens) and cp (sequence chunks).
#pragma once

#include <vector>

#include "engine/config/job_spec.h"
#include "engine/model/param_registry.h"

namespace ptrain::plan {

struct MatmulParams {         // global elements, active per token
  std::vector<double> layer;  // per transformer layer
  double head = 0;
  double total() const;
};

MatmulParams matmul_params(const std::vector<model::ParamInfo>& registry, const config::ModelSpec& model);

// Forward FLOPs of causal attention for one token in one layer: 2 * s * a*d.
double attention_flops_per_token(const config::ModelSpec& model);

struct StepFlops {
  double model = 0;     // no recompute: what MFU counts
  double hardware = 0;  // with recompute
};
StepFlops step_flops(const config::JobSpec& spec, const MatmulParams& matmul);

struct StageFlops {               // one microbatch on one rank, per virtual stage (chunk*pp + pp_rank)
  std::vector<double> forward;    // layers (+ LM head on the last virtual stage)
  std::vector<double> recompute;  // forward redone in backward (full recompute), else 0
};
StageFlops stage_flops(const config::JobSpec& spec, const MatmulParams& matmul);

}  // namespace ptrain::plan
