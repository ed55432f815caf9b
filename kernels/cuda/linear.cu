// Linear layer: out[M,N] = in[M,K] @ weight[N,K]^T + bias[N], on cuBLASLt (gemm.cuh).
// A row-major [r, c] matrix is a column-major [c, r] one, so every GEMM is written for transposes:
//   forward   out^T[N,M]   = (W stored [K,N], op T) . (in stored [K,M])            + bias (epilogue)
//   d_in      d_in^T[K,M]  = (W stored [K,N])       . (d_out stored [N,M])          beta 0 (overwrite)
//   d_weight  dW^T[K,N]   += (in stored [K,M])      . (d_out stored [N,M], op T)    beta 1 (accumulate)
// d_bias += column sums of d_out: where d_weight is F32 (fp32 sums) and cuBLASLt has an algorithm,
// its BGRADB epilogue on the d_weight GEMM, which reads d_out anyway, writes them to a scratch
// vector that `accumulate` adds to d_bias (the epilogue overwrites; the contract accumulates).
// The profile of 2026-11-22 timed the separate pass at 3.7 ms of a GPT-2 124M microbatch. Otherwise
// (no d_weight, BF16 d_weight, no algorithm) the deterministic column reduction (column_sums.cuh).
// Both sum in fp32 in an order fixed by the shape (and, for BGRADB, the algorithm cuBLASLt picks).
// PTRAIN_CUDA_BGRAD=0 in the environment keeps the column reduction, for A/B timing: cuBLASLt may
// pick a slower GEMM with the epilogue than without (reported for large GEMMs on A100, CUDA 11.7).
// Dtypes: in, weight and d_out share one element type, F32 or BF16. Outputs (out, d_in, d_weight) are
// F32, or either F32 or BF16 when the inputs are BF16 (fp32 accumulation in both cases); bias has
// out's dtype; d_bias is F32 or BF16. The BIAS epilogue is used when the bias is 16-byte aligned and
// cuBLASLt has an algorithm for it; otherwise bias is broadcast into out and the GEMM adds onto it.
//
// Linear + GELU (ops.h) with BF16 outputs put GELU in the epilogue of the forward GEMM (GELU_AUX[_BIAS]:
// out = gelu(pre), pre stored as the aux matrix, [N, M] column-major with leading dim N) or of the d_in
// GEMM (DGELU: d_pre = product * gelu'(pre), leading dim K). When try_gemm declines (N resp. K not a
// multiple of 8, pre or bias not 16-byte aligned, an empty dimension, or no algorithm), and always for
// F32 outputs, they run the unfused pair, the linear op then our GELU kernel. The epilogue differs from
// that pair by cuBLASLt's own evaluation of the tanh formula (possibly a hardware tanh, ~2^-11
// relative: below bf16's rounding, far above fp32's, which is why F32 never takes it) and by one
// rounding fewer (GELU and gelu' read the fp32 product; the pair reads it rounded to bf16).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

template <typename T>
struct BroadcastRows {
  T* out;
  const T* bias;
  std::int64_t n;
  __device__ void operator()(std::int64_t i) const { out[i] = bias[i % n]; }
};

template <typename T>
struct BiasGradValue {
  const T* d_out;
  int C;
  __device__ void operator()(int r, int c, float (&v)[1]) const {
    v[0] = to_f32(d_out[static_cast<std::int64_t>(r) * C + c]);
  }
};

std::atomic<std::uint64_t> epilogue_bias_grads{0};

// BGRADB unless PTRAIN_CUDA_BGRAD=0 (read once).
bool bgrad_epilogue() {
  static const bool on = [] {
    const char* v = std::getenv("PTRAIN_CUDA_BGRAD");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

void zero(const LaunchContext& ctx, Buf b, std::int64_t count) {
  PTRAIN_CUDA_CHECK(
      cudaMemsetAsync(b.ptr, 0, static_cast<std::size_t>(count) * dtype_size(b.dtype), ctx.stream));
}

// d_in^T[K,M] = (W stored [K,N]) . (d_out stored [N,M])
GemmArgs input_grad_gemm(Buf d_in, Buf d_out, Buf weight, int M, int N, int K) {
  GemmArgs g;
  g.m = K;
  g.n = M;
  g.k = N;
  g.a = weight.ptr;
  g.lda = K;
  g.b = d_out.ptr;
  g.ldb = N;
  g.a_type = g.b_type = d_out.dtype;
  g.d = d_in.ptr;
  g.ldd = K;
  g.d_type = d_in.dtype;
  return g;
}

// dW^T[K,N] += (in stored [K,M]) . (d_out stored [N,M], op T)
GemmArgs weight_grad_gemm(Buf d_weight, Buf d_out, Buf in, int M, int N, int K) {
  GemmArgs g;
  g.trans_b = true;
  g.m = K;
  g.n = N;
  g.k = M;
  g.a = in.ptr;
  g.lda = K;
  g.b = d_out.ptr;
  g.ldb = N;
  g.a_type = g.b_type = d_out.dtype;
  g.d = d_weight.ptr;
  g.ldd = K;
  g.d_type = d_weight.dtype;
  g.beta = 1.0f;
  return g;
}

// out[m,:] = bias for every row.
void broadcast_bias(const LaunchContext& ctx, Buf out, Buf bias, int M, int N) {
  dispatch_float(out.dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, std::int64_t{M} * N, BroadcastRows<T>{typed<T>(out), typed<const T>(bias), N});
  });
}

}  // namespace

GemmArgs forward_gemm(Buf out, Buf in, Buf weight, int M, int N, int K) {
  GemmArgs g;
  g.trans_a = true;
  g.m = N;
  g.n = M;
  g.k = K;
  g.a = weight.ptr;
  g.lda = K;
  g.b = in.ptr;
  g.ldb = K;
  g.a_type = g.b_type = in.dtype;
  g.d = out.ptr;
  g.ldd = N;
  g.d_type = out.dtype;
  return g;
}

void forward_with_bias(const LaunchContext& ctx, GemmArgs g, Buf out, Buf bias, int M, int N, int K) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: out = bias (or 0), or as it was
    if (bias) {
      broadcast_bias(ctx, out, bias, M, N);
    } else if (g.beta == 0.0f) {
      zero(ctx, out, std::int64_t{M} * N);
    }
    return;
  }
  if (bias) {
    g.bias = bias.ptr;
    if (try_gemm(ctx, g)) return;
    g.bias = nullptr;
    broadcast_bias(ctx, out, bias, M, N);
    g.beta = 1.0f;
  }
  gemm(ctx, g);
}

void forward_gelu(const LaunchContext& ctx, GemmArgs g, Buf out, Buf pre, Buf bias, int M, int N, int K,
                  Buf amax) {
  if (M == 0 || N == 0) return;
  if (K > 0 && out.dtype == DType::BF16) {
    GemmArgs fused = g;
    fused.bias = bias.ptr;  // null without a bias: GELU_AUX
    fused.gelu = GemmGelu::Forward;
    fused.aux = pre.ptr;
    fused.ld_aux = N;
    if (try_gemm(ctx, fused)) {
      if (amax) abs_max(ctx, amax, out, std::int64_t{M} * N, false);  // a pass over out: see linear.cuh
      return;
    }
  }
  g.d = pre.ptr;  // pre has out's dtype and shape
  forward_with_bias(ctx, g, pre, bias, M, N, K);
  gelu_forward(ctx, out, pre, std::int64_t{M} * N, amax);
}

void linear_forward(const LaunchContext& ctx, Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) {
  check_linear_forward("cuda", out, in, weight, bias, M, N, K);
  forward_with_bias(ctx, forward_gemm(out, in, weight, M, N, K), out, bias, M, N, K);
}

void linear_backward(const LaunchContext& ctx, Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                     Buf weight, int M, int N, int K) {
  check_linear_backward("cuda", d_in, d_weight, d_bias, d_out, in, weight, M, N, K);

  // d_in[M,K] = d_out[M,N] @ weight[N,K]   (overwrite)
  if (d_in && M > 0 && K > 0) {
    if (N == 0) {
      zero(ctx, d_in, std::int64_t{M} * K);
    } else {
      gemm(ctx, input_grad_gemm(d_in, d_out, weight, M, N, K));
    }
  }
  // d_weight[N,K] += d_out^T[N,M] @ in[M,K]   (accumulate), with d_bias's sums where BGRADB takes them
  bool bias_done = false;
  if (d_weight && N > 0 && K > 0 && M > 0) {
    GemmArgs g = weight_grad_gemm(d_weight, d_out, in, M, N, K);
    if (d_bias && d_weight.dtype == DType::F32 && bgrad_epilogue()) {
      const Scratch<float> sums(ctx, static_cast<std::size_t>(N));
      g.bias_grad = sums.get();
      bias_done = try_gemm(ctx, g);
      g.bias_grad = nullptr;
      if (bias_done) {
        epilogue_bias_grads.fetch_add(1, std::memory_order_relaxed);
        accumulate(ctx, d_bias, Buf{sums.get(), DType::F32}, N);
      }
    }
    if (!bias_done) gemm(ctx, g);
  }
  // d_bias[N] += column sums of d_out   (accumulate)
  if (d_bias && !bias_done && N > 0 && M > 0) {
    dispatch_float(d_out.dtype, [&](auto* t_tag) {
      using T = std::remove_pointer_t<decltype(t_tag)>;
      dispatch_float(d_bias.dtype, [&](auto* g_tag) {
        using G = std::remove_pointer_t<decltype(g_tag)>;
        column_sums_accumulate<1, G>(ctx, ColumnOutputs<1, G>{{typed<G>(d_bias)}},
                                     BiasGradValue<T>{typed<const T>(d_out), N}, M, N);
      });
    });
  }
}

void linear_input_grad_add(const LaunchContext& ctx, Buf d_in, Buf d_out, Buf weight, int M, int N, int K) {
  check_linear_input_grad_add("cuda", d_in, d_out, weight, M, N, K);
  if (M == 0 || N == 0 || K == 0) return;
  GemmArgs g = input_grad_gemm(d_in, d_out, weight, M, N, K);
  g.beta = 1.0f;
  gemm(ctx, g);
}

void linear_gelu_forward(const LaunchContext& ctx, Buf out, Buf pre, Buf in, Buf weight, Buf bias, int M,
                         int N, int K) {
  check_linear_gelu_forward("cuda", out, pre, in, weight, bias, M, N, K);
  forward_gelu(ctx, forward_gemm(out, in, weight, M, N, K), out, pre, bias, M, N, K);
}

void linear_backward_gelu(const LaunchContext& ctx, Buf d_pre, Buf d_weight, Buf d_bias, Buf d_out, Buf in,
                          Buf weight, Buf pre, int M, int N, int K) {
  check_linear_backward_gelu("cuda", d_pre, d_weight, d_bias, d_out, in, weight, pre, M, N, K);
  bool fused = false;
  if (M > 0 && N > 0 && K > 0 && d_pre.dtype == DType::BF16) {
    GemmArgs g = input_grad_gemm(d_pre, d_out, weight, M, N, K);
    g.gelu = GemmGelu::Backward;
    g.aux = pre.ptr;
    g.ld_aux = K;
    fused = try_gemm(ctx, g);
  }
  // d_weight and d_bias as linear_backward makes them; d_pre too unless the epilogue made it.
  linear_backward(ctx, fused ? Buf{} : d_pre, d_weight, d_bias, d_out, in, weight, M, N, K);
  if (!fused) gelu_backward(ctx, d_pre, d_pre, pre, std::int64_t{M} * K);
}

}  // namespace ptrain::kernels::cuda

namespace ptrain::kernels {

std::uint64_t cuda_bias_grads_from_epilogue() {
  return cuda::epilogue_bias_grads.load(std::memory_order_relaxed);
}

}  // namespace ptrain::kernels
