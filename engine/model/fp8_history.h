// Delayed scaling's amax histories (train.fp8.scaling: delayed; docs/fp8.md "Scaling"). For every
// tensor an FP8 linear layer casts -- each layer's linear layers (q, k, v, o, and the MLP's up, gate
// and down, or under MoE each expert's gate (w1), up (w3) and down (w2): fp8_linears_per_layer)
// times output gradient, input and weight -- the amaxes of the last `amax_history` steps, newest
// first. A cast scales by the largest amax of its history and records its own amax for the step;
// at the step's end the recorded amaxes are max-reduced over every rank and pushed in.
//
// The histories cover the whole model on every rank (a few kilobytes: layers x 21 x amax_history
// floats on the host, layers x 21 x 2 on the device, for a dense layer): a layer's amax is the maximum over whichever
// ranks hold parts or replicas of it (tp, cp, dp, other ranks contribute zeros), so one all-reduce
// per step serves every layout, and the histories equal the one-rank run's (its step amax is the
// largest over all the step's microbatches). The checkpoint saves them from rank 0 and any layout
// restores them. Before any step has been recorded (a fresh run, or a checkpoint without
// histories) a cast scales by its current amax, as under current scaling.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/runtime/owned_buffer.h"
#include "kernels/ops.h"

namespace ptrain::model {

enum class Fp8Linear : int { Q, K, V, O, Up, Gate, Down };
// A layer's linear layers in the histories: a dense layer's seven in Fp8Linear's order; an MoE
// layer's attention four, then expert e's gate, up and down at 4 + 3e + 0, 1, 2.
inline constexpr int kFp8DenseLinears = 7;
inline int fp8_linear_index(Fp8Linear which) { return static_cast<int>(which); }
int fp8_expert_linear_index(int expert, Fp8Linear which);  // which: Gate, Up or Down
// A linear layer's cast tensors, in model::BlockLinears' order: output gradient, input, weight.
inline constexpr int kFp8Operands = 3;

// The device amaxes of one linear layer, F32 [kFp8Operands] each.
struct Fp8LinearAmaxes {
  kernels::Buf scale;   // the amax a cast scales by: its history's largest
  kernels::Buf record;  // this step's largest so far (abs_max with combine)
};

class Fp8History {
 public:
  // The max-reduction of `n` host floats over every rank (in place).
  using MaxOverRanks = std::function<void(float* values, std::int64_t n)>;

  // `linears`: per layer (model::fp8_linears_per_layer).
  Fp8History(const kernels::Ops& ops, int layers, int linears, int length);

  int layers() const { return layers_; }
  int length() const { return length_; }
  // Whether a step has been recorded: until then a cast scales by its current amax.
  bool filled() const { return filled_; }
  Fp8LinearAmaxes linear(int layer, int index) const;  // index: fp8_linear_index, fp8_expert_linear_index
  // What it holds in the device's memory (model::fp8_history_device_bytes counts it for validate).
  std::int64_t device_bytes() const { return static_cast<std::int64_t>(scale_.bytes() + record_.bytes()); }

  // The step's end: its recorded amaxes max-reduced over the ranks and pushed into the histories
  // (a value that is not finite pushed as 0: the step's non-finite check names it, and the history
  // keeps scaling by its finite past), the scales taken again, the records cleared. Every rank calls
  // it at the same point.
  void end_step(const MaxOverRanks& max_over_ranks);
  // Clears what the step recorded without pushing it (a skipped update, an evaluation's forward).
  void discard_step();

  // The histories as [layers, linears, kFp8Operands, length] floats, newest first: what a
  // checkpoint saves; restore() takes a saved one whose length may differ (the newest entries that
  // fit are kept, the rest are zero) and marks the histories filled.
  const std::vector<float>& saved() const { return history_; }
  std::vector<std::int64_t> saved_shape() const { return {layers_, linears_, kFp8Operands, length_}; }
  void restore(const std::vector<float>& saved, std::int64_t saved_length);

 private:
  std::int64_t casts() const { return static_cast<std::int64_t>(layers_) * linears_ * kFp8Operands; }
  void upload_scales();

  const kernels::Ops& ops_;
  int layers_, linears_, length_;
  bool filled_ = false;
  std::vector<float> history_;            // host: [casts, length], newest first
  runtime::OwnedBuffer scale_, record_;  // device: [casts] each
};

}  // namespace ptrain::model
