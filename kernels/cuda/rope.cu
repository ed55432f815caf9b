// Rotary position embedding, HF "rotate half", in place on x[B, T, H, D] (F32 or BF16):
//   inv_freq_i = theta^(-2i/D), angle = (pos0 + t) * inv_freq_i, for i < D/2
//   x_i' = x_i cos - x_{i+D/2} sin,   x_{i+D/2}' = x_{i+D/2} cos + x_i sin
// Backward rotates the gradient by -angle. The angles are the CPU's bit for bit: inv_freq is computed
// on the host with the CPU's very expression (float pow) and passed to the kernel by value; the
// position times inv_freq is one float multiply; cos and sin of that angle are taken in double and
// rounded, and the rotation uses explicitly rounded products (no FMA contraction), so F32 results
// match kernels/cpu/rope.cpp to the last bit wherever device and host double cos/sin round alike.
// One thread per (row b*T+t, frequency i) computes its cos/sin once and rotates all H heads.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

inline constexpr int kMaxHalf = 256;  // D <= 512: the frequency table travels as a kernel argument

struct InvFreq {
  float v[kMaxHalf];
};

template <typename E>
struct RopeRotate {
  E* x;
  int T;
  int H;
  int D;
  int pos0;
  float sign;  // +1 forward, -1 backward
  InvFreq inv_freq;
  __device__ void operator()(std::int64_t idx) const {  // idx = row * (D/2) + i
    const int half = D / 2;
    const std::int64_t row = idx / half;
    const int i = static_cast<int>(idx % half);
    const std::int64_t t = row % T;
    const float pos = static_cast<float>(std::int64_t{pos0} + t);
    const double angle = static_cast<double>(__fmul_rn(pos, inv_freq.v[i]));
    double s = 0.0;
    double c = 0.0;
    sincos(angle, &s, &c);
    const float cf = static_cast<float>(c);
    const float sf = sign * static_cast<float>(s);
    E* head = x + row * H * D + i;
    for (int h = 0; h < H; ++h, head += D) {
      const float a = to_f32(head[0]);
      const float b = to_f32(head[half]);
      store_f32(head, __fsub_rn(__fmul_rn(a, cf), __fmul_rn(b, sf)));
      store_f32(head + half, __fadd_rn(__fmul_rn(b, cf), __fmul_rn(a, sf)));
    }
  }
};

void rope_apply(const LaunchContext& ctx, const char* op, Buf x, int B, int T, int H, int D, float theta,
                int pos0, float sign) {
  // A limit of this backend, not of the contract: the frequency table travels as a kernel argument.
  require(D / 2 <= kMaxHalf, "cuda", op, "D must be at most 512");
  const int half = D / 2;
  const std::int64_t rows = std::int64_t{B} * T;
  if (rows == 0 || H == 0 || half == 0) return;
  InvFreq inv_freq{};
  for (int i = 0; i < half; ++i) {  // exactly kernels/cpu/rope.cpp's expression
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    inv_freq.v[i] = 1.0f / std::pow(theta, exponent);
  }
  dispatch_float(x.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, rows * half, RopeRotate<E>{typed<E>(x), T, H, D, pos0, sign, inv_freq});
  });
}

}  // namespace

void rope_forward(const LaunchContext& ctx, Buf x, int B, int T, int H, int D, float theta, int pos0) {
  check_rope_forward("cuda", x, B, T, H, D, theta);
  rope_apply(ctx, "rope_forward", x, B, T, H, D, theta, pos0, 1.0f);
}

void rope_backward(const LaunchContext& ctx, Buf d_x, int B, int T, int H, int D, float theta, int pos0) {
  check_rope_backward("cuda", d_x, B, T, H, D, theta);
  rope_apply(ctx, "rope_backward", d_x, B, T, H, D, theta, pos0, -1.0f);
}

}  // namespace ptrain::kernels::cuda
