// Linear layer: out[M,N] = in[M,K] @ weight[N,K]^T + bias[N], weights [out, in] as in PyTorch.
// The three GEMMs go to OpenBLAS through gemm.h; the bias gradient's column sums are an OpenMP loop.
// Dtypes as on CUDA (linear.cu): in, weight and d_out share one type; out, d_in, d_weight are F32,
// or F32 or BF16 when that type is BF16; bias has out's dtype; d_bias is either. BF16 buffers are
// staged (bf16_staging.h).
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {

void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) {
  check_linear_forward("cpu", out, in, weight, bias, M, N, K);
  if (M == 0 || N == 0) return;
  Bf16Staging staging;
  out = staging.output(out, std::int64_t{M} * N);
  in = staging.input(in, std::int64_t{M} * K);
  weight = staging.input(weight, std::int64_t{N} * K);
  bias = staging.input(bias, N);
  gemm_nt(f32(out), cf32(in), cf32(weight), cf32(bias), M, N, K, false);
}

void linear_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N, int K) {
  check_linear_backward("cpu", d_in, d_weight, d_bias, d_out, in, weight, M, N, K);
  Bf16Staging staging;
  d_in = staging.output(d_in, std::int64_t{M} * K);
  d_weight = staging.output(d_weight, std::int64_t{N} * K);
  d_bias = staging.output(d_bias, N);
  const float* dy = cf32(staging.input(d_out, std::int64_t{M} * N));
  if (d_in) weight = staging.input(weight, std::int64_t{N} * K);
  if (d_weight) in = staging.input(in, std::int64_t{M} * K);

  // d_in[M,K] = d_out[M,N] @ weight[N,K]   (overwrite)
  if (d_in && M > 0 && K > 0) {
    if (N == 0) {
      std::fill(f32(d_in), f32(d_in) + std::int64_t{M} * K, 0.0f);
    } else {
      sgemm(CblasNoTrans, CblasNoTrans, M, K, N, dy, N, cf32(weight), K, 0.0f, f32(d_in), K);
    }
  }
  // d_weight[N,K] += d_out^T[N,M] @ in[M,K]   (accumulate: beta = 1)
  if (d_weight && N > 0 && K > 0 && M > 0) {
    sgemm(CblasTrans, CblasNoTrans, N, K, M, dy, N, cf32(in), K, 1.0f, f32(d_weight), K);
  }
  // d_bias[N] += column sums of d_out   (accumulate)
  if (d_bias && N > 0 && M > 0) column_sums_accumulate(f32(d_bias), dy, M, N);
}

void linear_input_grad_add(Buf d_in, Buf d_out, Buf weight, int M, int N, int K) {
  check_linear_input_grad_add("cpu", d_in, d_out, weight, M, N, K);
  if (M == 0 || N == 0 || K == 0) return;
  Bf16Staging staging;  // a BF16 d_in is staged from its values: the sum is rounded once
  d_in = staging.output(d_in, std::int64_t{M} * K);
  const float* dy = cf32(staging.input(d_out, std::int64_t{M} * N));
  weight = staging.input(weight, std::int64_t{N} * K);
  sgemm(CblasNoTrans, CblasNoTrans, M, K, N, dy, N, cf32(weight), K, 1.0f, f32(d_in), K);
}

}  // namespace ptrain::kernels::cpu
