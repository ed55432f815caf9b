// Activations, elementwise over n values.
// GELU, tanh approximation exactly as HF's gelu_new (GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// computed through s = sigmoid(2u) = 0.5 (1 + tanh u), see gelu_sigmoid below.
// SwiGLU (Llama MLP): out = silu(gate) * up, silu(g) = g sigmoid(g)
//   d_gate = d_out * up * sigmoid(g) (1 + g (1 - sigmoid(g))),  d_up = d_out * silu(g)
// Gradients overwrite. Outputs may alias inputs element for element (out == in, d_in == d_out),
// never with an offset. Chunks run in parallel; each chunk's loop is multiversioned (isa.h).
// All buffers of an op share one element type, F32 or BF16 (staged, bf16_staging.h), as on CUDA.
#include <cstdint>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/output_amax.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// With s = sigmoid(2u): 0.5 (1 + tanh u) = s and 1 - tanh(u)^2 = 4 s (1 - s), so
//   gelu(x) = x s,  gelu'(x) = s + 2 x s (1 - s) u'(x).
// The same function, but 1 + tanh and 1 - tanh^2 are never formed by cancellation: for x < -5
// float tanh is exactly -1 and that form returns 0 where the true values are ~1e-9 .. 1e-6.
// 2u is clamped to +-80 (sigmoid is saturated there), so e^{-2u} stays finite and 1 - s = e s.
struct GeluSigmoid {
  float s, one_minus_s;
};

[[gnu::always_inline]] inline GeluSigmoid gelu_sigmoid(float x) {
  float z = 2.0f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  z = z < -80.0f ? -80.0f : (z > 80.0f ? 80.0f : z);
  const float e = exp_f32(-z);
  const float s = 1.0f / (1.0f + e);
  return {s, e * s};
}

[[gnu::always_inline]] inline void gelu_forward_body(float* y, const float* x, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    y[i] = xi * gelu_sigmoid(xi).s;
  }
}

[[gnu::always_inline]] inline void gelu_backward_body(float* dx, const float* dy, const float* x,
                                                      std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const GeluSigmoid g = gelu_sigmoid(xi);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * xi * xi);
    dx[i] = dy[i] * (g.s + 2.0f * xi * g.s * g.one_minus_s * du);
  }
}

[[gnu::always_inline]] inline void swiglu_forward_body(float* y, const float* g, const float* u,
                                                       std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = g[i] * sigmoid_f32(g[i]) * u[i];
}

[[gnu::always_inline]] inline void swiglu_backward_body(float* dg, float* du, const float* dy, const float* g,
                                                        const float* u, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float ui = u[i];
    const float dyi = dy[i];
    const float s = sigmoid_f32(gi);
    dg[i] = dyi * ui * s * (1.0f + gi * (1.0f - s));
    du[i] = dyi * (gi * s);
  }
}

PTRAIN_CPU_MULTIVERSION(gelu_forward_kernel, gelu_forward_body, (float* y, const float* x, std::int64_t n),
                        (y, x, n))
PTRAIN_CPU_MULTIVERSION(gelu_backward_kernel, gelu_backward_body,
                        (float* dx, const float* dy, const float* x, std::int64_t n), (dx, dy, x, n))
PTRAIN_CPU_MULTIVERSION(swiglu_forward_kernel, swiglu_forward_body,
                        (float* y, const float* g, const float* u, std::int64_t n), (y, g, u, n))
PTRAIN_CPU_MULTIVERSION(swiglu_backward_kernel, swiglu_backward_body,
                        (float* dg, float* du, const float* dy, const float* g, const float* u,
                         std::int64_t n),
                        (dg, du, dy, g, u, n))

}  // namespace

void gelu_forward(Buf out, Buf in, std::int64_t n, Buf amax) {
  check_gelu_forward("cpu", out, in, n);
  check_output_amax("cpu", "gelu_forward", amax);
  Bf16Staging staging;
  float* y = f32(staging.output(out, n));
  const float* x = cf32(staging.input(in, n));
  OutputAmax y_amax(amax, out, parallel_chunk_count(n));
  parallel_chunks(n, [&](std::int64_t i, std::int64_t len) {
    gelu_forward_kernel(y + i, x + i, len);
    y_amax.fold(i / kParallelChunk, y + i, len);
  });
  y_amax.write();
}

void gelu_backward(Buf d_in, Buf d_out, Buf in, std::int64_t n, Buf amax) {
  check_gelu_backward("cpu", d_in, d_out, in, n);
  check_output_amax("cpu", "gelu_backward", amax);
  Bf16Staging staging;
  float* dx = f32(staging.output(d_in, n));
  const float* dy = cf32(staging.input(d_out, n));
  const float* x = cf32(staging.input(in, n));
  OutputAmax dx_amax(amax, d_in, parallel_chunk_count(n));
  parallel_chunks(n, [&](std::int64_t i, std::int64_t len) {
    gelu_backward_kernel(dx + i, dy + i, x + i, len);
    dx_amax.fold(i / kParallelChunk, dx + i, len);
  });
  dx_amax.write();
}

void swiglu_forward(Buf out, Buf gate, Buf up, std::int64_t n, Buf amax) {
  check_swiglu_forward("cpu", out, gate, up, n);
  check_output_amax("cpu", "swiglu_forward", amax);
  Bf16Staging staging;
  float* y = f32(staging.output(out, n));
  const float* g = cf32(staging.input(gate, n));
  const float* u = cf32(staging.input(up, n));
  OutputAmax y_amax(amax, out, parallel_chunk_count(n));
  parallel_chunks(n, [&](std::int64_t i, std::int64_t len) {
    swiglu_forward_kernel(y + i, g + i, u + i, len);
    y_amax.fold(i / kParallelChunk, y + i, len);
  });
  y_amax.write();
}

void swiglu_backward(Buf d_gate, Buf d_up, Buf d_out, Buf gate, Buf up, std::int64_t n, Buf amax) {
  check_swiglu_backward("cpu", d_gate, d_up, d_out, gate, up, n);
  check_output_amax("cpu", "swiglu_backward", amax);
  Bf16Staging staging;
  float* dg = f32(staging.output(d_gate, n));
  float* du = f32(staging.output(d_up, n));
  const float* dy = cf32(staging.input(d_out, n));
  const float* g = cf32(staging.input(gate, n));
  const float* u = cf32(staging.input(up, n));
  OutputAmax dg_amax(amax, d_gate, parallel_chunk_count(n));
  OutputAmax du_amax(amax ? Buf{f32(amax) + 1, DType::F32} : Buf{}, d_up, parallel_chunk_count(n));
  parallel_chunks(n, [&](std::int64_t i, std::int64_t len) {
    swiglu_backward_kernel(dg + i, du + i, dy + i, g + i, u + i, len);
    dg_amax.fold(i / kParallelChunk, dg + i, len);
    du_amax.fold(i / kParallelChunk, du + i, len);
  });
  dg_amax.write();
  du_amax.write();
}

}  // namespace ptrain::kernels::cpu
