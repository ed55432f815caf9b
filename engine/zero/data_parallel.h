// Data parallelism with ZeRO (Rajbhandari et al. 2020) over the dp-cp group, on the flat buffers of
// a ParamStore: who owns which chunk of every unit, the reductions of the gradients, the gathers of
// the parameters, the master weights, and AdamW (optim/adamw.h) applied to what this rank owns. The
// global gradient norm and clipping are the trainer's (train/grad_norm.h), over owned_grads().
// Every unit (embedding, layer, final norm + head) is padded to a multiple of
// 16 * D elements (D = group size) and split into D equal chunks; rank i owns chunk i of every unit.
// Each stage keeps:
//
//   stage  parameters             gradients                        optimizer (m, v)
//   0      full                   full; all-reduced per unit        full
//   1      full; chunks gathered   full; reduce-scattered per unit  own chunks
//   2      full; chunks gathered   own chunks + unit windows        own chunks
//   3      own chunks + windows    own chunks + unit windows        own chunks
//
// (windows: two that consecutive units alternate between, two more for the experts' units under
// expert parallelism, plus, with a tied head, one for the embedding's unit; see grad_windows_)
//
// Mixed precision (train.precision: bf16): the model computes with bf16 parameters (the full
// buffer, or the stage-3 windows) and fp32 gradients; the fp32 master weights the optimizer updates
// are kept with m and v (full at stage 0, own chunks otherwise) and converted into the bf16
// parameters after every step, so gathers move bf16. With train.grad_reduce: bf16 each unit's
// gradients are converted into a bf16 staging buffer, reduced in bf16, and converted back.
//
// Stages 0 and 1 reduce a unit's gradients once its last microbatch's backward is done; stages 2
// and 3 reduce-scatter each microbatch's unit gradients out of a window into the owned chunks as
// soon as the unit's backward is done (the window is reused). Stage 3 all-gathers a unit's
// parameters into a window when the unit before it (in forward or backward order) is announced, so
// the gather runs while that unit computes; the unit two later takes the window after.
// Gradients are summed over ranks: the loss gradient is already scaled by 1 / (tokens of the
// global batch).
//
// Offload (parallel.offload: optimizer, ZeRO-Offload): the fp32 master weights and the moments of
// what the rank updates live in host memory, and AdamW runs on the host's CPU (the CPU backend's
// kernel). step() copies the owned gradients out and returns; a worker thread (host_update_)
// updates unit after unit in forward order and converts each to the parameters' dtype on the host
// (so that bf16 crosses, half the bytes), while the next forward runs: a unit's weights cross to
// the device (and, at stages 1-2, are gathered) when the forward reaches it and its update is done,
// the next unit's as soon as its update is done. At stage 3 they cross into a device copy of the
// owned chunks (device_shard_), which the window gathers read. The device keeps the parameters (the
// owned chunks at stage 3) and the gradients only.
//
// Overlap: reductions are issued from the model's unit hooks in backward order as overlapped
// collectives (dist::Comm's tickets), so on a device backend the rest of the backward runs while
// they do. What must follow a reduction (bf16 results converted back, stage 2/3 chunks added into
// the owned gradients) waits in pending_ with the buffer the collective works on, and is done, after
// joining its ticket, only when that buffer is about to be written again (the next unit's bf16
// staging, a grad window's next unit) or when the gradients are read (finish_reductions, step).
// Parameter gathers are overlapped too: at stages 1 and 2 each unit's gather after the step is
// joined before the unit's first use in the next forward, so the forward starts while later units
// are still gathered; at stage 3 a window's gather is joined before its unit is used or the window
// is written again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/config/job_spec.h"
#include "engine/model/param_store.h"
#include "engine/model/unit_hooks.h"
#include "engine/optim/adamw.h"
#include "engine/parallel/staged_collectives.h"
#include "engine/runtime/ordered_worker.h"
#include "engine/runtime/owned_buffer.h"
#include "engine/runtime/pinned_range.h"
#include "kernels/ops.h"

namespace ptrain::parallel {

// How the ParamStore of a rank must be built for `spec`'s ZeRO stage and precision over `ranks`
// data-parallel ranks (and `expert_ranks` expert-dp ranks for the experts' units; 0: `ranks`), its
// buffers in `ops`' memory.
model::StoreOptions zero_store_options(const config::JobSpec& spec, int ranks, const kernels::Ops& ops,
                                       int expert_ranks = 0);

// Bytes this rank allocates for model state, by kind (what `validate` predicts per rank).
struct ZeroBytes {
  double params = 0, grads = 0;
  double optimizer = 0;  // m, v and (mixed precision) the fp32 master weights
  double windows = 0;    // gather and reduction windows (stages 2 and 3), the bf16 reduction staging
  double host = 0;       // offload: the host's optimizer state, gradient copy and weight staging
};

// The model-parallel groups around one data-parallel group. Under sequence parallelism the norms'
// gradients are summed over the tp group before the data-parallel reduction. With a tied head and pp > 1, the embedding group (this rank's
// first and last stage) is where the two copies of the word embedding sum their gradients before the
// data-parallel reduction, once the step's backward is done (Megatron), so that both stay equal.
struct ModelParallelGroups {
  const dist::Group* tensor = nullptr;
  const dist::Group* embedding = nullptr;  // on the first and the last stage only
  // Expert parallelism: the expert-dp group (the ranks holding the same experts), over which the
  // experts' units (model::ParamStore::expert_unit) are sharded and reduced instead of the dp-cp
  // group. Their owned chunks are distinct over the dp-cp group.
  const dist::Group* experts = nullptr;
};

class DataParallel final : public model::UnitHooks {
 public:
  // `store` must have been built with zero_store_options(spec, group.size(), ops). ZeRO stages 2 and 3
  // reduce per microbatch, so they take no embedding group (std::logic_error; config::load refuses).
  DataParallel(const config::JobSpec& spec, model::ParamStore& store, const kernels::Ops& ops, dist::Comm& comm,
               const dist::Group& group, ModelParallelGroups model_groups = {});

  int stage() const { return stage_; }
  ZeroBytes allocated_bytes() const;

  // Fresh weights from the seed (each rank initialises what it holds).
  void initialize(std::uint64_t seed, int layers);

  // Starts a step of `microbatches` microbatches: zeroes the gradients.
  void begin_step(int microbatches);
  // Call before each microbatch's forward (stages 0 and 1 reduce after the last one's backward).
  void begin_microbatch(int mb) { microbatch_ = mb; }

  void before_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

  // After the step's last backward: sums the tied embedding's copies over the embedding group,
  // reduces its unit (what after_backward deferred) and completes every reduction, so that
  // owned_grads() hold the step's reduced gradients. Once per step; step() calls it if the caller
  // did not.
  void finish_reductions();
  // The chunk of `unit` this rank owns, and its reduced gradients once finish_reductions() ran. At
  // stage 0 every rank holds all of the unit's reduced gradients but owns only this chunk of them,
  // which is what a sum over the ranks (the gradient norm) must count.
  model::FlatRange owned_range(int unit) const { return chunk(unit); }
  float* owned_grads(int unit) const;
  // AdamW on the owned chunks (everything at stage 0) from grad_scale x the gradients (the clip's
  // factor, or 1), then the model's parameters are rebuilt from the masters: under mixed precision
  // converted to bf16 in AdamW's own pass, gathered where the stage keeps them whole (a collective).
  void step(double lr, std::int64_t step, float grad_scale);

  // Offload: waits for the host's update and starts every unit's way to the device, as the next
  // training forward would unit by unit (before an evaluation, whose traffic is not a step's).
  void publish_update();
  // Offload: each upload from now on as a span of `trace`'s copy-stream track (nullptr stops).
  void set_trace(dist::Trace* trace) { trace_ = trace; }

  // The group ZeRO shards and reduces `unit` over (the dp-cp group, or the expert-dp group for an
  // expert unit).
  const dist::Group& group_of(int unit) const;

  // What this rank writes to a checkpoint: its chunks of (master) parameters and moments, in
  // shard_memory()'s memory (the host's when offloaded).
  std::vector<model::FlatShard> saved_shards();
  const kernels::Ops& shard_memory() const { return master_memory_; }
  // What this rank reads on resume (stage 0: everything; else its chunks); call
  // after_restore() once they are filled.
  std::vector<model::FlatShard> restored_shards();
  void after_restore();
  // Replaces the weights by `full` (host memory, the whole flat layout in fp32, e.g. imported HF
  // weights): each rank takes what it keeps.
  void assign_weights(const float* full);

 private:
  // The size of group_of(unit) and this rank's index in it.
  int ranks_of(int unit) const { return group_of(unit).size(); }
  int index_of(int unit) const { return group_of(unit).index; }
  model::FlatRange chunk(int unit) const;         // the range of `unit` this rank owns
  std::int64_t chunk_size(int unit) const;
  std::int64_t unit_size(int unit) const { return store_.units()[static_cast<size_t>(unit)].size(); }
  std::int64_t shard_offset(int unit) const { return shard_offsets_[static_cast<size_t>(unit)]; }
  int window_of(int unit) const;
  bool separate_master() const { return master_.size() > 0; }
  // Whether publishing writes the model's parameters from separate masters here (mixed precision at
  // stages 0-2 on the device; ZeRO 3 gathers its windows from the masters, offload stages on the host).
  bool writes_working_copy() const { return separate_master() && !offload_ && stage_ < 3; }
  // The fp32 weights AdamW updates: the model's own parameters (fp32 at stages 0-2), or the separate
  // master buffer (the whole flat layout at stage 0, the owned chunks packed at stages 1-3).
  float* master_params() const;
  model::FlatRange master_range(int unit) const;  // what this rank keeps of `unit` in the master
  float* owned_params(int unit) const;            // this rank's chunk of the unit's master weights
  std::int64_t moment_offset(int unit) const;     // where the unit's chunk starts in adamw_'s moments
  // The spans of AdamW's decay over the flat elements `range` (offsets from range.begin).
  std::vector<optim::DecaySpan> decay_spans(model::FlatRange range) const;
  // Starts summing the unit's fp32 gradients at `grads` over the group (all of them at stage 0,
  // this rank's chunk otherwise) in train.grad_reduce's dtype, on `grads` itself or the bf16 staging
  // buffer, and queues what must follow it in pending_.
  void reduce(float* grads, int unit);
  // A reduction in flight: its ticket, its unit, where the collective works and where the gradients
  // it reduced live (`grads`: the unit's own or a window).
  struct PendingReduction {
    dist::Comm::Ticket ticket;
    int unit;
    kernels::Buf reduced;
    float* grads;
  };
  void finish(const PendingReduction& p);  // joins and completes the reduction
  // Sequence parallelism: the unit's norm gradients (`grads` = the unit's start), partial sums over
  // the tp ranks' tokens, summed over tp before the data-parallel reduction.
  void sum_sequence_parallel_grads(float* grads, int unit);
  // With a tied head over pp stages: sums the word embedding's two copies over the embedding group,
  // then starts the reduction of its unit.
  void sum_tied_embedding();
  // Completes the pending reductions working on `buffer` (all of them for nullptr).
  void settle(const void* buffer = nullptr);
  // Stage 3: starts gathering the unit's parameters into its window unless they are there; with
  // `wait`, they are ready for the compute stream when this returns.
  void gather_params(int unit, bool wait);
  void join_gather(dist::Comm::Ticket& ticket);   // joins a parameter gather in flight, if any
  void await_gathers();                           // joins every parameter gather in flight
  void publish();                                 // the master weights into the model's parameters
  void publish_converted();                       // publish() once the bf16 copy is written (step())
  void gather_unit(int unit);                     // stages 1-2: starts all-gathering the unit's chunks
  void release_windows();                         // stage 3: no window holds a unit any more
  // Offload: where master_range(unit) starts in the master, the moments and host_grads_ (packed at
  // stages 1-3).
  std::int64_t master_offset(int unit) const;
  // Offload: copies the owned gradients out and starts the host's update (host_update_).
  void start_host_update(double lr, std::int64_t step, float grad_scale);
  void stage_on_host(int unit);   // offload, bf16: the unit's master converted into host_params_
  // Offload: the way of a unit's updated weights to the device. upload_unit starts the copy once
  // the host's update of the unit is done; land_unit makes the compute stream wait for it (and at
  // stages 1-2 starts the unit's gather); cross_ahead, as `unit` is about to compute, lands the next
  // unit if its upload is under way and starts the uploads of the two after it whose updates are
  // done. Each does nothing where the unit is further along.
  void upload_unit(int unit);
  void land_unit(int unit);
  void cross_ahead(int unit);

  const config::JobSpec& spec_;
  model::ParamStore& store_;
  const kernels::Ops& ops_;
  bool offload_;
  const kernels::Ops& master_memory_;  // where master_ and adamw_'s moments live: ops_, or the host's
  dist::Comm& comm_;
  const dist::Group& group_;
  int stage_;
  bool tied_ = false;                     // the head reuses the embedding (its unit stays resident)
  ModelParallelGroups model_groups_;
  std::vector<std::int64_t> shard_offsets_;  // where each unit's owned chunk starts in the shard buffers
  std::int64_t shard_numel_ = 0;
  // master_: fp32 weights apart from the model's parameters (stage 3, or mixed precision); else the
  // model's fp32 parameters are the master.
  runtime::OwnedBuffer master_, shard_grads_;
  // Offload: the owned gradients' copy, their weights converted to bf16 (mixed precision) on the
  // host, and at stage 3 the owned chunks in the parameters' dtype on the device.
  runtime::OwnedBuffer host_grads_, host_params_, device_shard_;
  std::vector<runtime::PinnedRange> pins_;  // offload: the host buffers that cross, page-locked
  enum class Crossing { OnHost, Uploading, Landed };
  std::vector<Crossing> crossing_;        // offload: where each unit's updated weights are
  std::vector<std::uint64_t> uploads_;    // offload: the unit's upload ticket while Uploading
  dist::Trace* trace_ = nullptr;
  optim::AdamW adamw_;  // its moments: of the whole flat layout at stage 0, else of the owned chunks
  // Stages 2, 3: the windows units pass through (window_of). Consecutive dense units alternate
  // between two, each as big as the biggest of them, and so do the experts' units (expert
  // parallelism) between two of their own; with a tied head the embedding's unit, open from the head
  // to the end of the backward, has one of its own (window 0).
  std::vector<runtime::OwnedBuffer> param_windows_, grad_windows_;
  std::vector<int> window_of_;            // each unit's window
  runtime::OwnedBuffer reduce_staging_;        // grad_reduce bf16: one unit of gradients in bf16
  std::vector<int> resident_;             // stage 3: the unit whose parameters each window holds (-1: none)
  // Parameter all-gathers in flight (0: none or done): stages 1-2 per unit (publish's), stage 3 per
  // window.
  std::vector<dist::Comm::Ticket> unit_gathers_, window_gathers_;
  std::vector<bool> grads_open_;          // stages 2, 3: the unit's gradients are accumulating in its window
  std::vector<PendingReduction> pending_;
  int microbatches_ = 1, microbatch_ = 0;
  bool backward_ended_ = false;           // finish_reductions ran this step
  parallel::StagedCollectives staged_;           // collectives on buffers the Comm cannot reach: via the host
  runtime::OrderedWorker host_update_;  // offload: AdamW unit by unit (last: joined before the buffers go)
};

}  // namespace ptrain::parallel
