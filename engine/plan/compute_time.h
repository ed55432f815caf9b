// The compute of one microbatch on one virtual stage, timed op by op from a measured profile
// (measured_profile.h) over the layer description (model/layer_description.h): the stage's
// layers, plus the embedding on the first virtual stage and the head and loss on the last.
//   forward      every op's forward;
//   backward     every op's input gradient, plus what recompute redoes first: full recompute the
//                layer's whole forward, selective the ops whose outputs it dropped (norms,
//                activation functions);
//   weight_grad  the GEMMs' weight gradients (zb-h1 runs them apart as W, after rebuilding what the
//                recompute mode dropped once more; other schedules inside B).
// Collectives are not here: the traffic model times them (traffic.h).
// A CPU profile measured ops on `threads` threads of `cores`; a rank of a job with r ranks per host
// (gpus_per_node) runs on t = max(1, cores / r) threads (as `ptrain run` sets them), and ranks
// beyond the cores share them: its times are the profile's x (threads / t) x max(1, r * t / cores)
// (linear scaling in threads, which GEMMs come close to and memory-bound ops do not). A profile's
// calibration (measured_profile.h) scales all of it by its compute_scale.
#pragma once

#include "engine/config/job_spec.h"
#include "engine/model/layer_description.h"
#include "engine/plan/measured_profile.h"

namespace ptrain::plan {

struct ComputeSeconds {
  double gemm = 0, attention = 0, memory = 0;
  double total() const { return gemm + attention + memory; }
  ComputeSeconds& operator+=(const ComputeSeconds& o);
};
ComputeSeconds operator*(double times, const ComputeSeconds& c);

struct StageCompute {
  ComputeSeconds forward, backward, weight_grad;
};

// How much slower a rank of this job computes than `profile` measured (1 for device profiles).
double rank_slowdown(const config::JobSpec& spec, const MeasuredProfile& profile);

StageCompute stage_compute(const config::JobSpec& spec, const model::ModelOps& ops, const MeasuredProfile& profile,
                           int virtual_stage, int layers);

}  // namespace ptrain::plan
