// RMSNorm over the last dim of [N, C] (Llama): out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps);
// forward saves rstd [N] (F32, optional). Backward, as the CPU:
//   xhat = x rstd, g = d_out * weight
//   d_in += rstd * (g - xhat * mean_c(g * xhat)),   d_weight += sum_n d_out * xhat
// Same structure and dtype rules as layernorm.cu (X for activations, W for weight, G for d_weight),
// and the fused add_rmsnorm_forward as add_layernorm_forward; the forwards' `amax` (of out) as there.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

// Row `row` of the forward, by the whole block in Packs of P: the one copy of the forward math, not
// inlined (as layernorm_forward_row) so the fused op gives the plain norm's bits, amax (the bits of a
// float) or null.
template <int P, typename X, typename W>
__device__ __noinline__ void rmsnorm_forward_row(X* out, float* rstd, unsigned* amax, const X* in,
                                                 const W* weight, int C, float eps, std::int64_t row) {
  const X* x = in + row * C;
  X* y = out + row * C;
  const float inv_c = 1.0f / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> xs;
    xs.load(x + c);
#pragma unroll
    for (int j = 0; j < P; ++j) sq += xs.v[j] * xs.v[j];
  }
  const float rs = 1.0f / sqrtf(block_sum(sq) * inv_c + eps);
  unsigned bits = 0;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> xs;
    Pack<W, P> ws;
    xs.load(x + c);
    ws.load(weight + c);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      xs.v[j] = xs.v[j] * rs * ws.v[j];
      bits = max(bits, stored_abs_bits<X>(xs.v[j]));
    }
    xs.store(y + c);
  }
  if (threadIdx.x == 0 && rstd != nullptr) rstd[row] = rs;
  if (amax != nullptr) block_fold_amax(amax, bits);  // every thread of the block, amax the same in all
}

template <int P, typename X, typename W>
__global__ void rmsnorm_forward_kernel(X* out, float* rstd, unsigned* amax, const X* in, const W* weight,
                                       int C, float eps) {
  rmsnorm_forward_row<P>(out, rstd, amax, in, weight, C, eps, blockIdx.x);
}

template <int P, typename X, typename W>
__global__ void add_rmsnorm_forward_kernel(X* x_out, X* out, float* rstd, unsigned* amax, const X* a,
                                           const X* b, const W* weight, int C, float eps) {
  block_add_row<P>(x_out, a, b, C, blockIdx.x);
  rmsnorm_forward_row<P>(out, rstd, amax, x_out, weight, C, eps, blockIdx.x);
}

template <int P, typename X, typename W>
__global__ void rmsnorm_backward_kernel(X* d_in, const X* d_out, const X* in, const W* weight,
                                        const float* rstd, int C) {
  const std::int64_t row = blockIdx.x;
  const X* x = in + row * C;
  const X* dy = d_out + row * C;
  X* dx = d_in + row * C;
  const float rs = rstd[row];
  const float inv_c = 1.0f / static_cast<float>(C);
  float sum_gx = 0.0f;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> dys, xs;
    Pack<W, P> ws;
    dys.load(dy + c);
    xs.load(x + c);
    ws.load(weight + c);
#pragma unroll
    for (int j = 0; j < P; ++j) sum_gx += dys.v[j] * ws.v[j] * (xs.v[j] * rs);
  }
  const float mean_gx = block_sum(sum_gx) * inv_c;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> dys, xs, dxs;
    Pack<W, P> ws;
    dys.load(dy + c);
    xs.load(x + c);
    ws.load(weight + c);
    dxs.load(dx + c);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float g = dys.v[j] * ws.v[j];
      dxs.v[j] += rs * (g - (xs.v[j] * rs) * mean_gx);
    }
    dxs.store(dx + c);
  }
}

// d_weight term of row r, column c.
template <typename X>
struct RmsNormWeightGrad {
  const X* d_out;
  const X* in;
  const float* rstd;
  int C;
  __device__ void operator()(int r, int c, float (&v)[1]) const {
    const std::int64_t i = static_cast<std::int64_t>(r) * C + c;
    v[0] = to_f32(d_out[i]) * (to_f32(in[i]) * rstd[r]);
  }
};

}  // namespace

void rmsnorm_forward(const LaunchContext& ctx, Buf out, Buf rstd, Buf in, Buf weight, int N, int C, float eps,
                     Buf amax) {
  check_rmsnorm_forward("cuda", out, rstd, in, weight, N, C);
  check_output_amax("cuda", "rmsnorm_forward", amax);
  zero_amax(ctx, amax);
  if (N == 0) return;
  dispatch_float(in.dtype, [&](auto* x_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    dispatch_float(weight.dtype, [&](auto* w_tag) {
      using W = std::remove_pointer_t<decltype(w_tag)>;
      with_row_pack<X>(rows_vectorizable<X>(C, {out, in, weight}), [&](auto pack) {
        constexpr int P = decltype(pack)::value;
        rmsnorm_forward_kernel<P, X, W><<<static_cast<unsigned>(N), row_block_size(C / P), 0, ctx.stream>>>(
            typed<X>(out), typed<float>(rstd), typed<unsigned>(amax), typed<const X>(in),
            typed<const W>(weight), C, eps);
        PTRAIN_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void add_rmsnorm_forward(const LaunchContext& ctx, Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight,
                         int N, int C, float eps, Buf amax) {
  check_add_rmsnorm_forward("cuda", x_out, out, rstd, a, b, weight, N, C);
  check_output_amax("cuda", "add_rmsnorm_forward", amax);
  zero_amax(ctx, amax);
  if (N == 0) return;
  dispatch_float(x_out.dtype, [&](auto* x_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    dispatch_float(weight.dtype, [&](auto* w_tag) {
      using W = std::remove_pointer_t<decltype(w_tag)>;
      with_row_pack<X>(rows_vectorizable<X>(C, {x_out, out, a, b, weight}), [&](auto pack) {
        constexpr int P = decltype(pack)::value;
        add_rmsnorm_forward_kernel<P, X, W>
            <<<static_cast<unsigned>(N), row_block_size(C / P), 0, ctx.stream>>>(
                typed<X>(x_out), typed<X>(out), typed<float>(rstd), typed<unsigned>(amax), typed<const X>(a),
                typed<const X>(b), typed<const W>(weight), C, eps);
        PTRAIN_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void rmsnorm_backward(const LaunchContext& ctx, Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight,
                      Buf rstd, int N, int C) {
  check_rmsnorm_backward("cuda", d_in, d_weight, d_out, in, weight, rstd, N, C);
  if (N == 0 || C == 0) return;
  dispatch_float(in.dtype, [&](auto* x_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    if (d_in) {
      dispatch_float(weight.dtype, [&](auto* w_tag) {
        using W = std::remove_pointer_t<decltype(w_tag)>;
        with_row_pack<X>(rows_vectorizable<X>(C, {d_in, d_out, in, weight}), [&](auto pack) {
          constexpr int P = decltype(pack)::value;
          rmsnorm_backward_kernel<P, X, W>
              <<<static_cast<unsigned>(N), row_block_size(C / P), 0, ctx.stream>>>(
                  typed<X>(d_in), typed<const X>(d_out), typed<const X>(in), typed<const W>(weight),
                  typed<const float>(rstd), C);
          PTRAIN_CUDA_CHECK_LAUNCH();
        });
      });
    }
    if (d_weight) {
      dispatch_float(d_weight.dtype, [&](auto* g_tag) {
        using G = std::remove_pointer_t<decltype(g_tag)>;
        column_sums_accumulate<1, G>(
            ctx, ColumnOutputs<1, G>{{typed<G>(d_weight)}},
            RmsNormWeightGrad<X>{typed<const X>(d_out), typed<const X>(in), typed<const float>(rstd), C}, N,
            C);
      });
    }
  });
}

}  // namespace ptrain::kernels::cuda
