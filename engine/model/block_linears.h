// The GEMMs of a transformer layer's linear layers (attention's q, k, v and output projections, the
// MLP's): the op set's linear ops as they are under fp32 and bf16; under train.precision fp8 its FP8
// GEMMs (ops.h fp8_cast, fp8_gemm; docs/fp8.md): each operand cast to FP8 codes first -- inputs and
// weights in E4M3, output gradients in E5M2 -- with a power-of-two scale from its amax: under
// current scaling this tensor's, now; under delayed scaling its history's largest
// (model/fp8_history.h), this amax recorded for it by the cast itself. The CPU's FP8 GEMMs compute
// what the linear ops over fp8_round's operands do, bit for bit, and the CUDA ones are checked
// against them. A weight is cast once a pass where its model chunk keeps its codes
// (model/fp8_weight_copies.h; not under ZeRO-3, whose gathered weight lives only for the layer: there
// at every use); bias gradients come from the unrounded output gradient, as in bf16. Linear layers
// that read one input (q, k and v; gate and up, an expert's too) cast it once between them
// (SharedInput). Under current scaling an operand's amax may come from the op that wrote the tensor
// (ops.h `amax`: a norm's, an activation's or its backward's output) or from one abs_max pass the
// layer took and kept (KnownAmaxes), read by every cast of the tensor, the weight gradient's too: the
// cast then takes no pass over the tensor for it.
//
// Every layout reproduces one rank: a current amax is taken over the tensor one rank would hold,
// where the layout splits it (a weight's and a row-parallel input's columns and a column-parallel
// output gradient's over tp; every token tensor over cp) the maximum over the tp and the cp group.
// Those are collectives: every rank of the groups makes the same calls in the same order; a rank
// whose result is not needed (a kv head's second copy) passes `apply` false and still takes part.
// A scale from the history needs no collective: the step's end reduces the records once.
#pragma once

#include <optional>

#include "engine/config/job_spec.h"
#include "engine/model/fp8_history.h"
#include "engine/model/fp8_weight_copies.h"
#include "engine/parallel/context_parallel.h"
#include "engine/parallel/tensor_parallel.h"
#include "kernels/ops.h"

namespace ptrain::model {

// How the FP8 GEMMs sum on a GPU (kernels/fp8.h; the CPU sums in FP32 either way): the forward's
// fast, the gradients' promoted into FP32 -- Transformer Engine's defaults (the split accumulator
// for dgrad and wgrad only) and torchao's (use_fast_accum for the output only): the forward takes
// the speed, and the gradients, whose errors the optimizer accumulates, keep the precise sums.
// `ptrain profile` times the GEMMs so.
inline constexpr kernels::Fp8Sums kFp8ForwardSums = kernels::Fp8Sums::Fast;
inline constexpr kernels::Fp8Sums kFp8GradientSums = kernels::Fp8Sums::Promoted;

// The workspace an FP8 linear layer casts its operands into (model/layer_description.h: Fp8*), for a
// layer out[M,N] = in[M,K] weight[N,K]^T. The code buffers are bytes whatever their Buf's dtype says
// (BlockLinears types them): the forward's operands, or the transposes the backward GEMMs read.
struct Fp8Scratch {
  kernels::Buf input;          // E4M3: [M, K] forward, [K, M] backward
  kernels::Buf weight;         // E4M3: [N, K] forward, [K, N] backward
  kernels::Buf output_grad;    // E5M2 [M, N] (the input gradient's operand)
  kernels::Buf amax;           // F32 [3]: the current amaxes (output gradient, input, weight)
  kernels::Buf output_grad_t;  // E5M2 [N, M] (the weight gradient's operand)
  kernels::Buf inv_scale;      // F32 [3]: the casts' inverse scales, in amax's order
};

// The FP8 codes of an input that several linear layers read (attention's q, k and v; the MLP's gate
// and up), cast by the first of them that needs them and read by the others: one amax pass and one
// cast instead of one each. Exact: the codes are those each would cast. Under current scaling the
// amax is the same tensor's; under delayed scaling each linear keeps its own history of that input,
// and the histories are equal, each recording the amaxes of the same tensors (the others record the
// first's record). One SharedInput serves the calls over one input tensor in one orientation (the
// forward's, or the weight gradients' transposed) while nothing else casts an input in between: the
// codes live in the workspace's input buffer, which the next cast of another input overwrites
// (the sibling calls are adjacent at every use).
struct SharedInput {
  kernels::Buf x;           // the input the codes are of (null: not cast yet)
  bool transposed = false;  // its codes as [K, M] (the weight gradient's operand)
  kernels::Buf codes, inv_scale;
  kernels::Buf record;  // under delayed scaling: the first's record of the input's amax
};

// Where a linear layer's weight codes are kept for the pass: its layer and linear index.
struct WeightCopyAt {
  Fp8WeightCopies* copies;
  int layer, index;
};

// The amaxes of a linear layer's input and output gradient on this rank, F32 in device memory, where
// something took them already (null: the cast takes them); read under current scaling (and under
// delayed scaling before the history holds a step).
struct KnownAmaxes {
  kernels::Buf in = {}, d_out = {};
};

class BlockLinears {
 public:
  using Buf = kernels::Buf;
  // Delayed scaling: this linear layer's amaxes and whether its history holds a step yet (until
  // then its casts scale by their current amaxes, which they record).
  struct Delayed {
    Fp8LinearAmaxes amaxes;
    bool filled = false;
  };
  // tp and cp: this rank's groups, or nullptr where the axis is 1; `delayed` under delayed scaling;
  // `shared`: the input's codes shared with the other linear layers that read it (nullptr: none);
  // `weight_copy`: where the weight's codes are kept for the pass (none: cast at every use).
  BlockLinears(const kernels::Ops& ops, config::Precision precision, const Fp8Scratch& scratch,
               parallel::TensorParallel* tp, parallel::ContextParallel* cp,
               std::optional<Delayed> delayed = std::nullopt, SharedInput* shared = nullptr,
               std::optional<WeightCopyAt> weight_copy = std::nullopt)
      : ops_(ops),
        fp8_(precision == config::Precision::Fp8),
        scratch_(scratch),
        tp_(tp),
        cp_(cp),
        delayed_(delayed),
        shared_(shared),
        weight_copy_(weight_copy) {}

  // As kernels::Ops' linear_forward, linear_gelu_forward, linear_backward, linear_backward_gelu and
  // linear_input_grad_add (the last done only when `apply`). `out_amax`, `d_pre_amax` (optional,
  // under FP8): receive the amax of out (GELU's output) and of d_pre, as ops.h's `amax`.
  void forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K, Buf in_amax = {}) const;
  void forward_gelu(Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M, int N, int K, Buf in_amax = {},
                    Buf out_amax = {}) const;
  void backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N, int K,
                KnownAmaxes known = {}) const;
  void backward_gelu(Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf pre, int M, int N,
                     int K, KnownAmaxes known = {}, Buf d_pre_amax = {}) const;
  void input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K, bool apply = true,
                      Buf d_out_amax = {}) const;

 private:
  // The casts a GEMM call needs: which of the output gradient's codes (as it is, transposed), the
  // input's and the weight's (each as in the forward, or transposed for the backward).
  struct Casts {
    bool d_out = false, d_out_t = false;
    bool in = false, weight = false;
    bool transposed = false;  // in and weight transposed
    KnownAmaxes known;
  };
  // The codes cast into the scratch (null where not asked), and their inverse scales.
  struct Operands {
    Buf d_out, d_out_t, in, weight;
    Buf d_out_inv, in_inv, weight_inv;
  };
  Operands cast(const Casts& which, Buf d_out, Buf in, Buf weight, int M, int N, int K) const;
  // Whether the input's codes are shared_'s already (after checking they are this input's).
  bool input_cast_before(Buf in, bool transposed) const;
  bool scales_by_history() const { return delayed_ && delayed_->filled; }

  const kernels::Ops& ops_;
  bool fp8_;
  Fp8Scratch scratch_;
  parallel::TensorParallel* tp_;
  parallel::ContextParallel* cp_;
  std::optional<Delayed> delayed_;
  SharedInput* shared_;
  std::optional<WeightCopyAt> weight_copy_;
};

}  // namespace ptrain::model
