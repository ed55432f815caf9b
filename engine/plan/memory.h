// Memory on one rank, in bytes.
//
// Model states (Rajbhandari et al. 2020, "ZeRO", section 3.1 with K = 12), Psi = elements on this
// rank (its pipeline stages, tp slices and experts), Nd = ranks ZeRO shards over (dp*cp for dense
// params, expert-dp = tp*cp*dp/ep for experts):
//   bf16: params 2 Psi, grads 4 Psi (fp32, accumulated across microbatches), optimizer 12 Psi (fp32 master, m, v)
//   fp32: params 4 Psi, grads 4 Psi, optimizer  8 Psi (m, v)
//   zero 1 divides the optimizer by Nd, zero 2 also the grads, zero 3 also the params.
//
// Activations (model/layer_description.h lists the tensors): per microbatch, a rank keeps
//   sum over its chunks of  layers * layer_set + token ids (virtual stage 0) + head set (last)
// and multiplies it by the schedule's peak number of live microbatches on that rank (simulating
// pipeline::build's lists: forward done, weight grad not yet, i.e. until B, or until W when zb-h1
// splits it; in units of a whole stage = chunks/vpp, so chunks are weighted equally), plus once
// per rank the backward workspace (model::backward_workspace: what recompute rebuilds, one layer's
// complete set under full and the dropped tensors under selective, and the backward temporaries).
//
// Communication buffers:
//   pp > 1        the pipeline's send buffers, one sbh each (/t under SP): send_buffers x sbh
//   tp > 1, SP    the all-gathered sequence: sbh
//   dense gradients are reduced in place, unit by unit (zero 0, 1: no buffer)
//   zero >= 2     reduction windows of a unit's gradients, two alternating (the unit in backward
//                 and the one before it, still reducing): 2 * largest unit * grad bytes; with a
//                 tied head a third for the embedding, open through the backward:
//                 (embedding unit + 2 * largest other unit) * grad bytes (RankParams::window_elements)
//   zero 3        the gathered params, in windows laid out as the gradients' ones: window elements
//                 * param bytes
//                 (units as ParamStore cuts them: embedding, one layer, final norm + head)
//   (experts' units are reduced in place as well, over expert-dp; the all-to-all's buffer under
//   ep > 1 is in the backward workspace, model::backward_workspace)
#pragma once

#include "engine/config/job_spec.h"
#include "engine/pipeline/buffers.h"
#include "engine/plan/rank_params.h"
#include "kernels/cudnn_attention_mode.h"

namespace ptrain::plan {

struct MemoryBreakdown {  // bytes on one rank
  double params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  // parallel.offload: optimizer: in the host's memory, not the device's (not in total()).
  double host = 0;
  // checkpoint.async: the host copy a save writes from (checkpoint_copy_bytes; not in total()).
  double checkpoint_copy = 0;
  double total() const { return params + grads + optimizer + activations + comm_buffers; }
  double host_total() const { return host + checkpoint_copy; }  // what the rank holds in the host's memory
};

struct ModelStateBytes {
  double params = 0, grads = 0, optimizer = 0;
  double host = 0;  // offloaded: the optimizer state, and the owned gradients' host copy
  double total() const { return params + grads + optimizer; }
};

// `elements` sharded by ZeRO `zero_stage` over `shards` ranks. Offloaded (ZeRO-Offload, stages 0-2),
// the owned elements' fp32 master, m and v and a host copy of their gradients are the host's: 16
// bytes each, whatever the precision (fp32 keeps a host master apart from the device's weights).
ModelStateBytes model_state_bytes(double elements, int shards, int zero_stage, config::Precision precision,
                                  bool offload = false);

// Dense params over dp*cp plus experts over expert-dp.
ModelStateBytes rank_model_state_bytes(const config::JobSpec& spec, const RankParams& params);

// A job's activation counts, read from its layer description (model/layer_description.h) once and
// then for any stage or rank: a search or an estimate over many ranks builds the description once
// per job, not once per rank (plan's search spent a quarter of its time rebuilding it). Refers to
// `spec`, which must outlive it.
class ActivationCounts {
 public:
  explicit ActivationCounts(const config::JobSpec& spec);
  explicit ActivationCounts(const config::JobSpec&&) = delete;  // it keeps a pointer to the spec
  const config::JobSpec& spec() const { return *spec_; }
  // Activations of one microbatch on virtual stage `stage` (its layers, with what they keep for W
  // when the schedule splits weight gradients (pipeline::Schedule::split_weight_grad); the
  // embedding's token ids on the first, the final norm, logits and loss on the last).
  double stage(int stage, bool split_weight_grad) const;
  // What `pp_rank` holds (`held`: pipeline::rank_buffers of the job's schedule, as the engine
  // allocates): each chunk's slots times its microbatch's activations, the backward workspace its
  // chunks share (on GPUs in bf16 with cuDNN attention's scratch), and with pp > 1 the output of a
  // chunk that is not the last, kept until it is sent.
  double rank(int pp_rank, const pipeline::RankBuffers& held) const;

 private:
  const config::JobSpec* spec_;
  double layer_ = 0, weight_grad_inputs_ = 0, embedding_ = 0, head_ = 0;  // one microbatch, by part
  double shared_ = 0;   // the backward workspace and cuDNN's scratch
  double message_ = 0;  // a pipeline message
};
// Device scratch of cuDNN's attention backward (kernels/cuda/cudnn_attention.h) in `mode`
// (PTRAIN_CUDNN_ATTENTION, kernels/cudnn_attention_mode.h), taken from the compute stream's pool
// for the call and kept by the pool: the rows' dot products, under GQA the per-query-head dK/dV
// copies (bf16) cuDNN sums over each group, and the fp32 dQ accumulator of `fast` and `auto` (as
// though cuDNN won every shape) or the bf16 dP workspace of `deterministic`, B x Hq x Tq x Tk
// (with context parallelism the largest call's: a rank's queries against all-gathered keys, else
// its own). GPU jobs in bf16 only (0 otherwise, and with `off`: F32 attention and the CPU run
// ptrain's own kernels, which need none).
double cudnn_attention_scratch_bytes(const config::JobSpec& spec, kernels::CudnnAttentionMode mode);
// The pipeline's send buffers (held.send_buffers messages), sequence parallelism's gather, expert
// dispatch, ZeRO windows and bf16 reduction staging.
double comm_buffer_bytes(const config::JobSpec& spec, const RankParams& params,
                         const pipeline::RankBuffers& held);

MemoryBreakdown rank_memory(const ActivationCounts& activations, const RankParams& params, int pp_rank,
                            const pipeline::RankBuffers& held);

// checkpoint.async (with checkpoint.dir): the host copy of what the rank saves, kept from one save to
// the next: its ZeRO chunks of the fp32 (master) weights, m and v, 12 bytes for each element it owns
// (dense over dp*cp, experts over expert-dp, at every stage), and the FP8 amax histories; else 0.
double checkpoint_copy_bytes(const config::JobSpec& spec, const RankParams& params);

// Offload: what the host of a node holds, the heaviest rank's host bytes times the node's ranks.
double node_host_bytes(const config::JobSpec& spec, const MemoryBreakdown& heaviest);

}  // namespace ptrain::plan
