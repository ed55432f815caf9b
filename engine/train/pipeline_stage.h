// The pipeline part of one rank: its model chunks (virtual stages), run for each step's microbatches
// by pipeline::ScheduleExecutor over the instruction list that pipeline::build gives its pp rank
// (docs/schedules.md: the simulator, the drawing and the executor run the same lists), and the forward-only
// chain of validation. With pp = 1 there is one chunk, the whole model, and the list is F and B per
// microbatch. Schedules that split weight gradients (zb-h1, zbv, dualpipev) run W as
// Transformer::weight_grad. The hop between two chunks of one rank (the V's turn of zbv and
// dualpipev) is a copy from the earlier chunk's output into the later chunk's input slot.
//
// Messages go over the pp group, activations on channel 0 and gradients on channel 1 (the execution
// contract of pipeline/schedule.h). A received activation goes straight into its slot's input, a
// received gradient into the backward workspace, and what is sent is copied into the send buffer the
// executor names, left in flight and waited for where it says (pipeline::rank_buffers, which
// validate counts too). The pp group opens the schedule's channels first (Comm::open_channels: NCCL
// gives each its own communicator). Device buffers with a Comm that cannot take them (Gloo, for
// ranks that share a GPU) go through host copies: a host mirror per send buffer, kept until its send
// is over, and one for receiving.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"
#include "engine/model/param_store.h"
#include "engine/model/transformer.h"
#include "engine/model/unit_hooks.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/pipeline/executor.h"
#include "engine/runtime/device_scalars.h"
#include "engine/runtime/owned_buffer.h"
#include "engine/zero/data_parallel.h"
#include "kernels/ops.h"

namespace ptrain::train {

// Fills microbatch `mb`'s tokens and targets (host memory, micro_batch * seq_len each).
using MicrobatchLoader = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;

class PipelineStage {
 public:
  // `pp_group`: this rank's pp group (index = pp rank; nullptr with pp = 1); `tp`, `cp`, `ep`: its
  // tensor-, context- and expert-parallel groups (nullptr with tp = 1, cp = 1, ep = 1).
  PipelineStage(const config::JobSpec& spec, model::ParamStore& params, const kernels::Ops& ops,
                dist::Comm& comm, const dist::Group* pp_group, parallel::TensorParallel* tp,
                parallel::ContextParallel* cp, parallel::ExpertParallel* ep, int microbatches);
  ~PipelineStage();

  // The rank that holds the last virtual stage computes the loss (its last chunk in both placements).
  bool computes_loss() const { return chunks_.back()->last_stage(); }
  // False where messages of device memory go through NCCL: the device waits for them, not the host.
  bool messages_wait_on_host() const { return ops_.device() == kernels::Device::Cpu || staged_; }
  void set_hooks(model::UnitHooks* hooks);
  // train.fp8.scaling delayed: every chunk's casts scale from `history` (model/fp8_history.h).
  void set_fp8_history(const model::Fp8History* history);
  // The weights may have changed since the last pass: every chunk's kept FP8 weight codes are cast
  // again at their next use (model::Transformer::weights_changed).
  void weights_changed();
  std::int64_t fp8_weight_copy_bytes() const;
  // Records each F/B/W and each wait for a message as a span of `trace` (nullptr: none).
  void set_trace(dist::Trace* trace) { trace_ = trace; }
  std::int64_t activation_bytes() const;  // all chunks' arenas and the send buffers

  // One step's forward and backward of every microbatch; on the last stage microbatch mb's loss sum
  // goes to loss_sums.at(mb). `zero` learns which microbatch each backward belongs to. Returns the
  // seconds the host waited for messages (receives, and sends it needed done): the rank's idle time
  // where messages_wait_on_host().
  double train(const MicrobatchLoader& load, float grad_scale, const runtime::DeviceScalars& loss_sums,
               parallel::DataParallel& zero);
  // Forward only of one microbatch through every stage (validation): the counted tokens and the loss
  // sum in `loss_sum` on the last stage, 0 elsewhere.
  std::int64_t evaluate(const std::int32_t* tokens, const std::int32_t* targets, kernels::Buf loss_sum);

 private:
  // What the Comm sends for send buffer `index` holding `buffer`: the buffer, or its host mirror.
  const void* outgoing(kernels::Buf buffer, int index);
  // Receives a message of `bytes` into `into`, through the host when staged.
  void receive(kernels::Buf into, std::size_t bytes, int peer, int channel);

  class Step;  // one step's pipeline::StageWork

  dist::Comm& comm_;
  const dist::Group* pp_group_;
  int pp_rank_, pp_;
  const kernels::Ops& ops_;
  bool staged_;  // messages go through host_sends_ and host_receive_
  pipeline::ScheduleExecutor executor_;
  std::vector<std::unique_ptr<model::Transformer>> chunks_;
  runtime::OwnedBuffer send_buffers_;  // executor_.buffers().send_buffers messages
  // Under a cap on the microbatches in flight: the slots every chunk of the rank draws from
  // (executor_.buffers().shared_slots, each as large as the largest chunk's slot).
  runtime::OwnedBuffer shared_slots_;
  std::vector<std::byte> host_sends_, host_receive_;
  std::vector<std::int32_t> tokens_, targets_;
  dist::Trace* trace_ = nullptr;
};

}  // namespace ptrain::train
