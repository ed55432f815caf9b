#include "engine/plan/memory.h"

#include <algorithm>

#include "engine/model/layer_description.h"
#include "engine/plan/traffic.h"
#include "engine/config/stage_placement.h"
#include "engine/plan/dtypes.h"

namespace ptrain::plan {

// Offloaded per owned element: fp32 master, m, v, and the gradient's host copy.
constexpr double kOffloadedBytesPerElement = 16;

ModelStateBytes model_state_bytes(double elements, int shards, int zero_stage, config::Precision precision,
                                  bool offload) {
  const BytesPerElement b = bytes_per_element(precision);
  const double n = shards;
  if (offload) {  // the device keeps the weights (stage 3: the owned chunks) and the gradients
    const double owned = elements / (zero_stage >= 1 ? n : 1.0);
    return {elements * b.param / (zero_stage == 3 ? n : 1.0), elements * b.grad / (zero_stage >= 2 ? n : 1.0), 0.0,
            owned * (kOffloadedBytesPerElement)};
  }
  // Under ZeRO-3 a rank's shard of the weights is the master; with a separate fp32 master (bf16)
  // it is counted in the optimizer state and the bf16 weights exist only in the gather windows.
  const double params = zero_stage < 3 ? elements * b.param : b.master > 0 ? 0.0 : elements * b.param / n;
  return {params, elements * b.grad / (zero_stage >= 2 ? n : 1.0),
          elements * b.optimizer() / (zero_stage >= 1 ? n : 1.0)};
}

ModelStateBytes rank_model_state_bytes(const config::JobSpec& spec, const RankParams& params) {
  const config::ParallelSpec& p = spec.parallel;
  const config::Precision precision = spec.train.precision;
  const bool offload = p.offload == config::Offload::Optimizer;
  const ModelStateBytes dense =
      model_state_bytes(static_cast<double>(params.dense), p.dp * p.cp, p.zero, precision, offload);
  const ModelStateBytes expert =
      model_state_bytes(static_cast<double>(params.expert), p.expert_dp(), p.zero, precision, offload);
  return {dense.params + expert.params, dense.grads + expert.grads, dense.optimizer + expert.optimizer,
          dense.host + expert.host};
}

// The largest call, counted in the tp rank's heads: the rank's query rows (seq / cp of them; under
// cp's a2a its heads / cp over the whole sequence, the same count) against keys over the whole
// sequence under allgather and a2a, over a ring block (seq / cp) under ring. The kv copies are
// per query head over the keys the call has (a2a: its heads / cp over the sequence).
double cudnn_attention_scratch_bytes(const config::JobSpec& spec, kernels::CudnnAttentionMode mode) {
  if (spec.backend == config::Backend::Cpu || spec.cluster.gpu == "cpu" ||
      !config::bf16_working(spec.train.precision) || mode == kernels::CudnnAttentionMode::Off)
    return 0.0;
  const config::ModelSpec& m = spec.model;
  const config::CpComm cp_comm = spec.parallel.cp_comm;
  const double query_length = static_cast<double>(m.seq_len / spec.parallel.cp);
  const double key_length = cp_comm == config::CpComm::Ring ? query_length : static_cast<double>(m.seq_len);
  const double copied_key_length = cp_comm == config::CpComm::Allgather ? key_length : query_length;
  const double batch = spec.train.micro_batch, heads = m.heads / spec.parallel.tp, d = m.head_dim();
  const double tokens = batch * query_length;
  const double gqa_copies = m.kv_heads == m.heads ? 0.0 : 2.0 * batch * copied_key_length * heads * d * 2;
  const double row_sums = tokens * heads * 4;
  const double variant = mode == kernels::CudnnAttentionMode::Deterministic
                             ? batch * heads * query_length * key_length * 2  // dP, bf16
                             : tokens * heads * d * 4;                        // dQ's fp32 accumulator
  return row_sums + gqa_copies + variant;
}

ActivationCounts::ActivationCounts(const config::JobSpec& spec) : spec_(&spec) {
  const model::ModelOps ops = model::model_ops(spec);
  layer_ = model::total_bytes(model::saved_tensors(ops.layer, spec.train.recompute));
  weight_grad_inputs_ = model::total_bytes(model::layer_weight_grad_inputs(spec));
  embedding_ = model::total_bytes(model::saved_tensors(ops.embedding, config::Recompute::None));
  head_ = model::total_bytes(model::saved_tensors(ops.head, config::Recompute::None));
  shared_ = model::total_bytes(model::backward_workspace(spec)) +
            cudnn_attention_scratch_bytes(spec, kernels::cudnn_attention_mode());
  message_ = spec.parallel.pp > 1 ? bytes_sent(pipeline_message(spec)) : 0.0;
}

double ActivationCounts::stage(int stage, bool split_weight_grad) const {
  const int stages = spec_->parallel.pp * spec_->schedule.virtual_stages;
  double sum = spec_->schedule.resolved_layers_per_stage[static_cast<size_t>(stage)] *
               (layer_ + (split_weight_grad ? weight_grad_inputs_ : 0.0));
  if (stage == 0) sum += embedding_;
  if (stage == stages - 1) sum += head_;
  return sum;
}

double ActivationCounts::rank(int pp_rank, const pipeline::RankBuffers& held) const {
  const config::StagePlacement place = config::StagePlacement::of(*spec_);
  double sum = shared_;
  if (held.shared_slots > 0) {  // one set of slots, each as large as the largest chunk's
    double largest = 0;
    for (int c = 0; c < place.vpp; ++c)
      largest = std::max(largest, stage(place.virtual_stage(pp_rank, c), held.split_weight_grad));
    sum += held.shared_slots * largest;
  } else {
    for (int c = 0; c < place.vpp; ++c)
      sum += held.activation_slots[static_cast<size_t>(c)] * stage(place.virtual_stage(pp_rank, c), held.split_weight_grad);
  }
  if (model::sends_stage_output(model::shard_coords(*spec_, pp_rank, 0, 0))) sum += message_;
  return sum;
}


double comm_buffer_bytes(const config::JobSpec& spec, const RankParams& params,
                         const pipeline::RankBuffers& held) {
  const config::ParallelSpec& p = spec.parallel;
  const BytesPerElement bytes = bytes_per_element(spec.train.precision);
  double sum = 0;
  if (p.pp > 1) sum += held.send_buffers * bytes_sent(pipeline_message(spec));
  if (p.zero >= 2) sum += static_cast<double>(params.window_elements()) * bytes.grad;
  if (p.zero == 3) sum += static_cast<double>(params.window_elements()) * bytes.param;
  // bf16 reductions convert one unit's fp32 gradients into a bf16 staging buffer.
  if (spec.train.grad_reduce == config::Precision::Bf16 && p.dp * p.cp > 1)
    sum += static_cast<double>(params.largest_unit) * grad_reduce_bytes(spec.train);
  return sum;
}

MemoryBreakdown rank_memory(const ActivationCounts& activations, const RankParams& params, int pp_rank,
                            const pipeline::RankBuffers& held) {
  const config::JobSpec& spec = activations.spec();
  const ModelStateBytes states = rank_model_state_bytes(spec, params);
  MemoryBreakdown m{states.params, states.grads, states.optimizer, activations.rank(pp_rank, held),
                    comm_buffer_bytes(spec, params, held), states.host};
  // Delayed scaling's amax scales and records: training state beside the optimizer's (a few KB).
  m.optimizer += static_cast<double>(model::fp8_history_device_bytes(spec));
  // FP8 weight codes kept for the pass, as stored and transposed (a byte an element each) and their
  // inverse scale: weights (model/fp8_weight_copies.h).
  if (model::keeps_fp8_weight_copies(spec))
    m.params += 2.0 * static_cast<double>(params.fp8_linear) + 4.0 * static_cast<double>(params.fp8_linear_weights);
  m.checkpoint_copy = checkpoint_copy_bytes(spec, params);
  // Offloaded bf16 weights are converted on the host before they go to the device: a bf16 copy of
  // what the rank updates (the whole store at stage 0, its owned chunks otherwise).
  if (spec.parallel.offload == config::Offload::Optimizer && config::bf16_working(spec.train.precision))
    m.host += updated_elements(spec, params) * bytes_per_element(spec.train.precision).param;
  return m;
}

double checkpoint_copy_bytes(const config::JobSpec& spec, const RankParams& params) {
  if (!spec.checkpoint.async || spec.checkpoint.dir.empty()) return 0.0;
  constexpr double kSavedBytesPerElement = 12;  // fp32 weights, m and v
  const config::ParallelSpec& p = spec.parallel;
  const double owned = static_cast<double>(params.dense) / (p.dp * p.cp) +
                       static_cast<double>(params.expert) / std::max(1, p.expert_dp());
  double histories = 0;
  if (spec.train.precision == config::Precision::Fp8 && spec.train.fp8.scaling == config::Fp8Scaling::Delayed)
    histories = 3.0 * model::fp8_linears_per_layer(spec.model) * spec.model.layers * spec.train.fp8.amax_history *
                sizeof(float);
  return owned * kSavedBytesPerElement + histories;
}

double node_host_bytes(const config::JobSpec& spec, const MemoryBreakdown& heaviest) {
  return heaviest.host * std::min(spec.cluster.gpus_per_node, spec.world);
}

}  // namespace ptrain::plan
