// Activations over n elements, fp32 math, the CPU's formulas (kernels/cpu/activations.cpp):
//   GELU (tanh approximation, HF gelu_new) through s = sigmoid(2u) = 0.5 (1 + tanh u),
//   u = sqrt(2/pi) (x + 0.044715 x^3), 2u clamped to +-80:
//     gelu(x) = x s,  gelu'(x) = s + 2 x s (1 - s) u'(x)
//   SwiGLU: out = silu(gate) * up
//     d_gate = d_out * up * sigmoid(g) (1 + g (1 - sigmoid(g))),  d_up = d_out * silu(g)
// Dtypes: all buffers of an op share one element type, F32 or BF16. Outputs may alias inputs element
// for element (each thread reads its element's inputs before writing), as ops.h allows.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/activations.cuh"
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

template <typename E>
struct GeluForward {
  E* out;
  const E* in;
  __device__ void operator()(std::int64_t i) const {
    const float x = to_f32(in[i]);
    store_f32(out + i, x * gelu_sigmoid(x).s);
  }
};

template <typename E>
struct GeluBackward {
  E* d_in;
  const E* d_out;
  const E* in;
  __device__ void operator()(std::int64_t i) const {
    const float x = to_f32(in[i]);
    const float dy = to_f32(d_out[i]);
    const GeluSigmoid g = gelu_sigmoid(x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    store_f32(d_in + i, dy * (g.s + 2.0f * x * g.s * g.one_minus_s * du));
  }
};

template <typename E>
struct SwigluForward {
  E* out;
  const E* gate;
  const E* up;
  __device__ void operator()(std::int64_t i) const {
    const float g = to_f32(gate[i]);
    store_f32(out + i, g * sigmoid(g) * to_f32(up[i]));
  }
};

template <typename E>
struct SwigluBackward {
  E* d_gate;
  E* d_up;
  const E* d_out;
  const E* gate;
  const E* up;
  __device__ void operator()(std::int64_t i) const {
    const float g = to_f32(gate[i]);
    const float u = to_f32(up[i]);
    const float dy = to_f32(d_out[i]);
    const float s = sigmoid(g);
    store_f32(d_gate + i, dy * u * s * (1.0f + g * (1.0f - s)));
    store_f32(d_up + i, dy * (g * s));
  }
};

}  // namespace

void gelu_forward(const LaunchContext& ctx, Buf out, Buf in, std::int64_t n) {
  check_gelu_forward("cuda", out, in, n);
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, GeluForward<E>{typed<E>(out), typed<const E>(in)});
  });
}

void gelu_backward(const LaunchContext& ctx, Buf d_in, Buf d_out, Buf in, std::int64_t n) {
  check_gelu_backward("cuda", d_in, d_out, in, n);
  dispatch_float(d_in.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, GeluBackward<E>{typed<E>(d_in), typed<const E>(d_out), typed<const E>(in)});
  });
}

void swiglu_forward(const LaunchContext& ctx, Buf out, Buf gate, Buf up, std::int64_t n) {
  check_swiglu_forward("cuda", out, gate, up, n);
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n, SwigluForward<E>{typed<E>(out), typed<const E>(gate), typed<const E>(up)});
  });
}

void swiglu_backward(const LaunchContext& ctx, Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up,
                     std::int64_t n) {
  check_swiglu_backward("cuda", d_gate, d_up, d_out, gate, up, n);
  dispatch_float(d_gate.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, n,
               SwigluBackward<E>{typed<E>(d_gate), typed<E>(d_up), typed<const E>(d_out),
                                 typed<const E>(gate), typed<const E>(up)});
  });
}

}  // namespace ptrain::kernels::cuda
