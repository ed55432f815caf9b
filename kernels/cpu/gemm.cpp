// The CPU's GEMMs (gemm.h).
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace ptrain::kernels::cpu {
namespace {

// out[m,:] = bias for every row, so that the GEMM can accumulate onto it (beta = 1).
void broadcast_rows(float* out, const float* bias, std::int64_t M, std::int64_t N) {
#pragma omp parallel for schedule(static) if (M * N >= kParallelMinElements)
  for (std::int64_t m = 0; m < M; ++m) std::copy(bias, bias + N, out + m * N);
}

}  // namespace

// Each thread takes a block of C's rows (or of its columns when there are fewer rows than threads *
// kMinBlock) and makes one single-threaded OpenBLAS call.
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

void gemm_nt(float* out, const float* a, const float* b, const float* bias, int M, int N, int K, bool accumulate) {
  if (M == 0 || N == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias != nullptr) {
    broadcast_rows(out, bias, M, N);
    beta = 1.0f;
  } else if (K == 0 && !accumulate) {
    std::fill(out, out + std::int64_t{M} * N, 0.0f);
  }
  if (K == 0) return;
  sgemm(CblasNoTrans, CblasTrans, M, N, K, a, K, b, K, beta, out, N);
}

}  // namespace ptrain::kernels::cpu
