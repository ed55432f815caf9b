// The CPU's GEMMs (linear.cpp, fp8_gemm.cpp): OpenBLAS (row-major cblas_sgemm), split into one block
// of output rows or columns per OpenMP thread, each a single-threaded OpenBLAS call: one thread pool
// for the whole backend (OpenBLAS's own pool spinning beside OpenMP's made 2 threads slower than 1).
// Every element of C is computed by one call over the whole K, so the result does not depend on the
// thread count.
#pragma once

#include <cblas.h>

namespace ptrain::kernels::cpu {

// C[M,N] = op(A)[M,K] op(B)[K,N] + beta*C, row-major.
void sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

// out[M,N] = a[M,K] b[N,K]^T (+ bias[N], optional), or with `accumulate` out += a b^T (no bias):
// linear_forward's GEMM, and the FP8 GEMM's over decoded operands. M, N, K >= 0.
void gemm_nt(float* out, const float* a, const float* b, const float* bias, int M, int N, int K, bool accumulate);

}  // namespace ptrain::kernels::cpu
