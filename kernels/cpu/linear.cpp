// Linear layer: out[M,N] = in[M,K] @ weight[N,K]^T + bias[N], weights [out, in] as in PyTorch.
// The three GEMMs go to OpenBLAS (row-major cblas_sgemm, which runs its own thread pool); the bias
// broadcast and the bias gradient's column sums are OpenMP loops.
#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ptrain::kernels::cpu {
namespace {

// out[m,:] = bias for every row, so that the GEMM can accumulate onto it (beta = 1).
void broadcast_rows(float* out, const float* bias, std::int64_t M, std::int64_t N) {
#pragma omp parallel for schedule(static) if (M * N >= kParallelMinElements)
  for (std::int64_t m = 0; m < M; ++m) std::copy(bias, bias + N, out + m * N);
}

}  // namespace

void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) {
  constexpr const char* op = "linear_forward";
  require_sizes(op, {M, N, K});
  require_buf(op, "out", out, DType::F32);
  require_buf(op, "in", in, DType::F32);
  require_buf(op, "weight", weight, DType::F32);
  require_opt(op, "bias", bias, DType::F32);
  if (M == 0 || N == 0) return;
  float* o = f32(out);
  float beta = 0.0f;
  if (bias) {
    broadcast_rows(o, cf32(bias), M, N);
    beta = 1.0f;
  } else if (K == 0) {
    std::fill(o, o + std::int64_t{M} * N, 0.0f);
  }
  if (K == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, cf32(in), K, cf32(weight), K, beta, o,
              N);
}

void linear_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, int M, int N, int K) {
  constexpr const char* op = "linear_backward";
  require_sizes(op, {M, N, K});
  require_opt(op, "d_in", d_in, DType::F32);
  require_opt(op, "d_weight", d_weight, DType::F32);
  require_opt(op, "d_bias", d_bias, DType::F32);
  require_buf(op, "d_out", d_out, DType::F32);
  if (d_in) require_buf(op, "weight", weight, DType::F32);
  if (d_weight) require_buf(op, "in", in, DType::F32);
  const float* dy = cf32(d_out);

  // d_in[M,K] = d_out[M,N] @ weight[N,K]   (overwrite)
  if (d_in && M > 0 && K > 0) {
    if (N == 0) {
      std::fill(f32(d_in), f32(d_in) + std::int64_t{M} * K, 0.0f);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dy, N, cf32(weight), K, 0.0f,
                  f32(d_in), K);
    }
  }
  // d_weight[N,K] += d_out^T[N,M] @ in[M,K]   (accumulate: beta = 1)
  if (d_weight && N > 0 && K > 0 && M > 0) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dy, N, cf32(in), K, 1.0f,
                f32(d_weight), K);
  }
  // d_bias[N] += column sums of d_out   (accumulate)
  if (d_bias && N > 0 && M > 0) column_sums_accumulate(f32(d_bias), dy, M, N);
}

}  // namespace ptrain::kernels::cpu
