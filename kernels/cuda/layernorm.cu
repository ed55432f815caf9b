// LayerNorm over the last dim of [N, C]: out = (x - mean) * rstd * weight + bias, biased variance,
// rstd = 1/sqrt(var + eps); forward saves mean and rstd [N] (F32, optional). Backward, as the CPU:
//   xhat = (x - mean) rstd, g = d_out * weight
//   d_in += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))      (accumulates)
//   d_weight += sum_n d_out * xhat,  d_bias += sum_n d_out         (accumulate)
// One block per row, rows moved in 16-byte Packs where C and the alignment allow (launch.cuh), fp32
// math, two-pass mean/variance like the CPU; parameter gradients through the
// deterministic column reduction (column_sums.cuh). add_layernorm_forward: one kernel whose block adds
// its row (block_add_row, stored as X) and then runs the plain forward's row code on the stored row.
// The forwards' `amax` (of out): each thread folds |what it stores| in registers, the block folds its
// row's into amax[0] (amax.cuh), zeroed by the entry first.
// Dtypes: in, out, d_out, d_in share one element type X; weight and bias one type W; d_weight and
// d_bias one type G; each F32 or BF16 independently (e.g. BF16 activations with F32 gradients).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

// Row `row` of the forward, by the whole block in Packs of P: the one copy of the forward math. Not
// inlined, so layernorm_forward_kernel and add_layernorm_forward_kernel run the same machine code and
// the fused op gives the plain norm's bits (at the same P, which depends on C and the alignment);
// with or without amax (the bits of a float, or null) the same code stores the same values.
template <int P, typename X, typename W>
__device__ __noinline__ void layernorm_forward_row(X* out, float* mean, float* rstd, unsigned* amax,
                                                   const X* in, const W* weight, const W* bias, int C,
                                                   float eps, std::int64_t row) {
  const X* x = in + row * C;
  X* y = out + row * C;
  const float inv_c = 1.0f / static_cast<float>(C);
  float sum = 0.0f;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> xs;
    xs.load(x + c);
#pragma unroll
    for (int j = 0; j < P; ++j) sum += xs.v[j];
  }
  const float mu = block_sum(sum) * inv_c;
  float sq = 0.0f;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> xs;
    xs.load(x + c);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float d = xs.v[j] - mu;
      sq += d * d;
    }
  }
  const float rs = 1.0f / sqrtf(block_sum(sq) * inv_c + eps);
  unsigned bits = 0;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> xs;
    Pack<W, P> ws, bs;
    xs.load(x + c);
    ws.load(weight + c);
    if (bias != nullptr) bs.load(bias + c);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      float v = (xs.v[j] - mu) * rs * ws.v[j];
      if (bias != nullptr) v += bs.v[j];
      xs.v[j] = v;
      bits = max(bits, stored_abs_bits<X>(v));
    }
    xs.store(y + c);
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[row] = mu;
    if (rstd != nullptr) rstd[row] = rs;
  }
  if (amax != nullptr) block_fold_amax(amax, bits);  // every thread of the block, amax the same in all
}

template <int P, typename X, typename W>
__global__ void layernorm_forward_kernel(X* out, float* mean, float* rstd, unsigned* amax, const X* in,
                                         const W* weight, const W* bias, int C, float eps) {
  layernorm_forward_row<P>(out, mean, rstd, amax, in, weight, bias, C, eps, blockIdx.x);
}

template <int P, typename X, typename W>
__global__ void add_layernorm_forward_kernel(X* x_out, X* out, float* mean, float* rstd, unsigned* amax,
                                             const X* a, const X* b, const W* weight, const W* bias, int C,
                                             float eps) {
  block_add_row<P>(x_out, a, b, C, blockIdx.x);
  layernorm_forward_row<P>(out, mean, rstd, amax, x_out, weight, bias, C, eps, blockIdx.x);
}

template <int P, typename X, typename W>
__global__ void layernorm_backward_kernel(X* d_in, const X* d_out, const X* in, const W* weight,
                                          const float* mean, const float* rstd, int C) {
  const std::int64_t row = blockIdx.x;
  const X* x = in + row * C;
  const X* dy = d_out + row * C;
  X* dx = d_in + row * C;
  const float mu = mean[row];
  const float rs = rstd[row];
  const float inv_c = 1.0f / static_cast<float>(C);
  float sum_g = 0.0f;
  float sum_gx = 0.0f;
  for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
    Pack<X, P> dys, xs;
    Pack<W, P> ws;
    dys.load(dy + c);
    xs.load(x + c);
    ws.load(weight + c);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float g = dys.v[j] * ws.v[j];
      sum_g += g;
      sum_gx += g * (xs.v[j] - mu) * rs;
    }
  }
  const float mean_g = block_sum(sum_g) * inv_c;
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
      const float xhat = (xs.v[j] - mu) * rs;
      const float g = dys.v[j] * ws.v[j];
      dxs.v[j] += rs * (g - mean_g - xhat * mean_gx);
    }
    dxs.store(dx + c);
  }
}

// (d_weight, d_bias) terms of row r, column c.
template <typename X>
struct LayerNormParamGrad {
  const X* d_out;
  const X* in;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int r, int c, float (&v)[2]) const {
    const std::int64_t i = static_cast<std::int64_t>(r) * C + c;
    const float dy = to_f32(d_out[i]);
    v[0] = dy * ((to_f32(in[i]) - mean[r]) * rstd[r]);
    v[1] = dy;
  }
};

}  // namespace

void layernorm_forward(const LaunchContext& ctx, Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias,
                       int N, int C, float eps, Buf amax) {
  check_layernorm_forward("cuda", out, mean, rstd, in, weight, bias, N, C);
  check_output_amax("cuda", "layernorm_forward", amax);
  zero_amax(ctx, amax);
  if (N == 0) return;
  dispatch_float(in.dtype, [&](auto* x_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    dispatch_float(weight.dtype, [&](auto* w_tag) {
      using W = std::remove_pointer_t<decltype(w_tag)>;
      with_row_pack<X>(rows_vectorizable<X>(C, {out, in, weight, bias}), [&](auto pack) {
        constexpr int P = decltype(pack)::value;
        layernorm_forward_kernel<P, X, W><<<static_cast<unsigned>(N), row_block_size(C / P), 0, ctx.stream>>>(
            typed<X>(out), typed<float>(mean), typed<float>(rstd), typed<unsigned>(amax), typed<const X>(in),
            typed<const W>(weight), typed<const W>(bias), C, eps);
        PTRAIN_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void add_layernorm_forward(const LaunchContext& ctx, Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b,
                           Buf weight, Buf bias, int N, int C, float eps, Buf amax) {
  check_add_layernorm_forward("cuda", x_out, out, mean, rstd, a, b, weight, bias, N, C);
  check_output_amax("cuda", "add_layernorm_forward", amax);
  zero_amax(ctx, amax);
  if (N == 0) return;
  dispatch_float(x_out.dtype, [&](auto* x_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    dispatch_float(weight.dtype, [&](auto* w_tag) {
      using W = std::remove_pointer_t<decltype(w_tag)>;
      with_row_pack<X>(rows_vectorizable<X>(C, {x_out, out, a, b, weight, bias}), [&](auto pack) {
        constexpr int P = decltype(pack)::value;
        add_layernorm_forward_kernel<P, X, W>
            <<<static_cast<unsigned>(N), row_block_size(C / P), 0, ctx.stream>>>(
                typed<X>(x_out), typed<X>(out), typed<float>(mean), typed<float>(rstd), typed<unsigned>(amax),
                typed<const X>(a), typed<const X>(b), typed<const W>(weight), typed<const W>(bias), C, eps);
        PTRAIN_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void layernorm_backward(const LaunchContext& ctx, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                        Buf weight, Buf mean, Buf rstd, int N, int C) {
  check_layernorm_backward("cuda", d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, N, C);
  if (N == 0 || C == 0) return;
  dispatch_float(in.dtype, [&](auto* x_tag) {
    using X = std::remove_pointer_t<decltype(x_tag)>;
    if (d_in) {
      dispatch_float(weight.dtype, [&](auto* w_tag) {
        using W = std::remove_pointer_t<decltype(w_tag)>;
        with_row_pack<X>(rows_vectorizable<X>(C, {d_in, d_out, in, weight}), [&](auto pack) {
          constexpr int P = decltype(pack)::value;
          layernorm_backward_kernel<P, X, W>
              <<<static_cast<unsigned>(N), row_block_size(C / P), 0, ctx.stream>>>(
                  typed<X>(d_in), typed<const X>(d_out), typed<const X>(in), typed<const W>(weight),
                  typed<const float>(mean), typed<const float>(rstd), C);
          PTRAIN_CUDA_CHECK_LAUNCH();
        });
      });
    }
    if (d_weight || d_bias) {
      dispatch_float(d_weight ? d_weight.dtype : d_bias.dtype, [&](auto* g_tag) {
        using G = std::remove_pointer_t<decltype(g_tag)>;
        column_sums_accumulate<2, G>(
            ctx, ColumnOutputs<2, G>{{typed<G>(d_weight), typed<G>(d_bias)}},
            LayerNormParamGrad<X>{typed<const X>(d_out), typed<const X>(in), typed<const float>(mean),
                                  typed<const float>(rstd), C},
            N, C);
      });
    }
  });
}

}  // namespace ptrain::kernels::cuda
