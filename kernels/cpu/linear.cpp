// Linear layer: out[M,N] = in[M,K] @ weight[N,K]^T + bias[N], weights [out, in] as in PyTorch.
// The three GEMMs go to OpenBLAS (row-major cblas_sgemm), split into one block of output rows or
// columns per OpenMP thread, each a single-threaded OpenBLAS call: one thread pool for the whole
// backend (OpenBLAS's own pool spinning beside OpenMP's made 2 threads slower than 1). The bias
// broadcast and the bias gradient's column sums are OpenMP loops. Dtypes as on CUDA (linear.cu): in,
// weight and d_out share one type; out, d_in, d_weight are F32, or F32 or BF16 when that type is
// BF16; bias has out's dtype; d_bias is either. BF16 buffers are staged (bf16_staging.h).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

// out[m,:] = bias for every row, so that the GEMM can accumulate onto it (beta = 1).
void broadcast_rows(float* out, const float* bias, std::int64_t M, std::int64_t N) {
#pragma omp parallel for schedule(static) if (M * N >= kParallelMinElements)
  for (std::int64_t m = 0; m < M; ++m) std::copy(bias, bias + N, out + m * N);
}

// C[M,N] = op(A)[M,K] op(B)[K,N] + beta*C, row-major, over the OpenMP threads: each takes a block
// of C's rows (or of its columns when there are fewer rows than threads * kMinBlock) and makes one
// single-threaded OpenBLAS call. Every element of C is computed by one call over the whole K, so
// the result does not depend on the thread count.
void sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  constexpr int kMinBlock = 32;
  // Split only while OpenBLAS is single-threaded (set_cpu_threads); otherwise one call uses its pool.
  const bool split = openblas_get_num_threads() == 1 && std::int64_t{M} * N * K >= kParallelMinElements * 64;
  const int threads = split ? omp_get_max_threads() : 1;
  const bool split_rows = M >= threads * kMinBlock || M >= N;
  const int extent = split_rows ? M : N;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int begin = static_cast<int>(std::int64_t{extent} * t / n);
    const int end = static_cast<int>(std::int64_t{extent} * (t + 1) / n);
    if (end > begin) {
      if (split_rows) {
        const float* a = trans_a == CblasNoTrans ? A + std::int64_t{begin} * lda : A + begin;
        cblas_sgemm(CblasRowMajor, trans_a, trans_b, end - begin, N, K, 1.0f, a, lda, B, ldb, beta,
                    C + std::int64_t{begin} * ldc, ldc);
      } else {
        const float* b = trans_b == CblasNoTrans ? B + begin : B + std::int64_t{begin} * ldb;
        cblas_sgemm(CblasRowMajor, trans_a, trans_b, M, end - begin, K, 1.0f, A, lda, b, ldb, beta, C + begin,
                    ldc);
      }
    }
  }
}

}  // namespace

void linear_forward(Buf out, Buf in, Buf weight, Buf bias, int M, int N, int K) {
  check_linear_forward("cpu", out, in, weight, bias, M, N, K);
  if (M == 0 || N == 0) return;
  Bf16Staging staging;
  out = staging.output(out, std::int64_t{M} * N);
  in = staging.input(in, std::int64_t{M} * K);
  weight = staging.input(weight, std::int64_t{N} * K);
  bias = staging.input(bias, N);
  float* o = f32(out);
  float beta = 0.0f;
  if (bias) {
    broadcast_rows(o, cf32(bias), M, N);
    beta = 1.0f;
  } else if (K == 0) {
    std::fill(o, o + std::int64_t{M} * N, 0.0f);
  }
  if (K == 0) return;
  sgemm(CblasNoTrans, CblasTrans, M, N, K, cf32(in), K, cf32(weight), K, beta, o, N);
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
