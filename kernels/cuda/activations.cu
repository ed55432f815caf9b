// Activations over n elements, fp32 math, the CPU's formulas (kernels/cpu/activations.cpp):
//   GELU (tanh approximation, HF gelu_new) through s = sigmoid(2u) = 0.5 (1 + tanh u),
//   u = sqrt(2/pi) (x + 0.044715 x^3), 2u clamped to +-80:
//     gelu(x) = x s,  gelu'(x) = s + 2 x s (1 - s) u'(x)
//   SwiGLU: out = silu(gate) * up
//     d_gate = d_out * up * sigmoid(g) (1 + g (1 - sigmoid(g))),  d_up = d_out * silu(g)
// Dtypes: all buffers of an op share one element type, F32 or BF16. Outputs may alias inputs element
// for element (each thread reads its element's inputs before writing), as ops.h allows.
// `amax` (of the output; swiglu_backward's [2]: d_gate's, then d_up's): every element is stored
// through store_folding_amax, which keeps the bits of |the stored value| in a register, and the
// block folds its largest into amax once its grid-stride loop is done (amax.cuh); without an amax
// the same kernel runs and skips that fold, so the outputs are the same either way.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

struct GeluSigmoid {
  float s, one_minus_s;
};

__device__ __forceinline__ GeluSigmoid gelu_sigmoid(float x) {
  float z = 2.0f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  z = z < -80.0f ? -80.0f : (z > 80.0f ? 80.0f : z);  // keeps NaN (fminf/fmaxf would drop it)
  const float e = expf(-z);
  const float s = 1.0f / (1.0f + e);
  return {s, e * s};
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Each functor stores element i of its kOutputs outputs, folding |stored| into bits[output].
template <typename E>
struct GeluForward {
  static constexpr int kOutputs = 1;
  E* out;
  const E* in;
  __device__ void operator()(std::int64_t i, unsigned (&bits)[kOutputs]) const {
    const float x = to_f32(in[i]);
    store_folding_amax(out + i, x * gelu_sigmoid(x).s, bits[0]);
  }
};

template <typename E>
struct GeluBackward {
  static constexpr int kOutputs = 1;
  E* d_in;
  const E* d_out;
  const E* in;
  __device__ void operator()(std::int64_t i, unsigned (&bits)[kOutputs]) const {
    const float x = to_f32(in[i]);
    const float dy = to_f32(d_out[i]);
    const GeluSigmoid g = gelu_sigmoid(x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    store_folding_amax(d_in + i, dy * (g.s + 2.0f * x * g.s * g.one_minus_s * du), bits[0]);
  }
};

template <typename E>
struct SwigluForward {
  static constexpr int kOutputs = 1;
  E* out;
  const E* gate;
  const E* up;
  __device__ void operator()(std::int64_t i, unsigned (&bits)[kOutputs]) const {
    const float g = to_f32(gate[i]);
    store_folding_amax(out + i, g * sigmoid(g) * to_f32(up[i]), bits[0]);
  }
};

template <typename E>
struct SwigluBackward {
  static constexpr int kOutputs = 2;
  E* d_gate;
  E* d_up;
  const E* d_out;
  const E* gate;
  const E* up;
  __device__ void operator()(std::int64_t i, unsigned (&bits)[kOutputs]) const {
    const float g = to_f32(gate[i]);
    const float u = to_f32(up[i]);
    const float dy = to_f32(d_out[i]);
    const float s = sigmoid(g);
    store_folding_amax(d_gate + i, dy * u * s * (1.0f + g * (1.0f - s)), bits[0]);
    store_folding_amax(d_up + i, dy * (g * s), bits[1]);
  }
};

// f(i, bits) for every i in [0, n) in a grid-stride loop (launch.cuh's map_kernel), then, with an
// amax (F32 [F::kOutputs] as bits, zeroed by the entry), the block's largest |stored| folded into it:
// after the loop, which every thread of the block leaves (no early return), as block_fold_amax needs.
template <typename F>
__global__ void activation_kernel(std::int64_t n, F f, unsigned* amax) {
  unsigned bits[F::kOutputs] = {};
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) f(i, bits);
  if (amax == nullptr) return;  // uniform over the grid
#pragma unroll
  for (int k = 0; k < F::kOutputs; ++k) block_fold_amax(amax + k, bits[k]);
}

// The entry's launch: amax (F32, optional, F::kOutputs values) checked and zeroed, then the kernel.
template <typename F>
void launch_activation(const LaunchContext& ctx, const char* op, std::int64_t n, const F& f, Buf amax) {
  check_output_amax("cuda", op, amax);
  zero_amax(ctx, amax, F::kOutputs);
  if (n <= 0) return;
  activation_kernel<<<grid_for(n), kBlock, 0, ctx.stream>>>(n, f, typed<unsigned>(amax));
  PTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gelu_forward(const LaunchContext& ctx, Buf out, Buf in, std::int64_t n, Buf amax) {
  check_gelu_forward("cuda", out, in, n);
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_activation(ctx, "gelu_forward", n, GeluForward<E>{typed<E>(out), typed<const E>(in)}, amax);
  });
}

void gelu_backward(const LaunchContext& ctx, Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax) {
  check_gelu_backward("cuda", d_in, d_out, in, n);
  dispatch_float(d_in.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_activation(ctx, "gelu_backward", n,
                      GeluBackward<E>{typed<E>(d_in), typed<const E>(d_out), typed<const E>(in)}, amax);
  });
}

void swiglu_forward(const LaunchContext& ctx, Buf out, Buf gate, Buf up, std::int64_t n, Buf amax) {
  check_swiglu_forward("cuda", out, gate, up, n);
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_activation(ctx, "swiglu_forward", n,
                      SwigluForward<E>{typed<E>(out), typed<const E>(gate), typed<const E>(up)}, amax);
  });
}

void swiglu_backward(const LaunchContext& ctx, Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up,
                     std::int64_t n, Buf amax) {
  check_swiglu_backward("cuda", d_gate, d_up, d_out, gate, up, n);
  dispatch_float(d_gate.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_activation(ctx, "swiglu_backward", n,
                      SwigluBackward<E>{typed<E>(d_gate), typed<E>(d_up), typed<const E>(d_out),
                                        typed<const E>(gate), typed<const E>(up)},
                      amax);
  });
}

}  // namespace ptrain::kernels::cuda
