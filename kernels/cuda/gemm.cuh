// One cuBLASLt matmul in cuBLAS's column-major terms, for linear.cu and fp8_gemm.cu:
//   D[m,n] = a_scale b_scale op(A)[m,k] op(B)[k,n] + beta * D  (+ bias[m] broadcast over columns, BIAS
// epilogue), optionally with GELU in the epilogue (GemmGelu), or with the sums of op(B) over k written
// to bias_grad[n] (BGRADB: a weight gradient's GEMM that also yields its bias gradient). A and B are
// both F32 or both BF16 (D F32, or BF16 when A/B are BF16), or FP8 (E4M3/E5M2, not both E5M2; only
// "TN": trans_a and not trans_b; a_scale and b_scale the device pointers to their factors; D BF16 or
// F32). Accumulation and scaling are fp32 (CUBLAS_COMPUTE_32F: no TF32, so F32 GEMMs match the CPU to
// rounding; FP8 sums as fp8_fast_accum says: the tensor cores' reduced-precision partial sums
// promoted into FP32 periodically, or kept for the whole K; an FP8 GEMM's bias only with a BF16 D).
// cuBLASLt's heuristic runs once per distinct descriptor (shape, types, epilogue, alignments): its
// choice is cached for the process.
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

// GELU in the epilogue, cuBLASLt's (the tanh approximation, as PyTorch's _addmm_activation relies on,
// evaluated by cuBLASLt: it agrees with our GELU kernels to rounding, not bit for bit):
//   Forward   D = gelu(X), X = the product (+ bias), and X itself stored to aux  (GELU_AUX[_BIAS])
//   Backward  D = product * gelu'(aux)                                           (DGELU; no bias)
// aux is an [m, n] matrix of D's type (cuBLASLt's default for it), leading dim ld_aux.
enum class GemmGelu { None, Forward, Backward };

struct GemmArgs {
  bool trans_a = false;  // op(A) = A^T: A is stored as [k, m] (column-major, leading dim lda)
  bool trans_b = false;  // op(B) = B^T: B is stored as [n, k]
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;
  const void* b = nullptr;
  std::int64_t ldb = 0;
  DType a_type = DType::F32;
  DType b_type = DType::F32;
  const float* a_scale = nullptr;  // FP8 only: device pointers to the factors of A and B
  const float* b_scale = nullptr;
  bool fp8_fast_accum = false;     // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM (Fp8Sums::Fast, kernels/fp8.h)
  void* d = nullptr;  // also C (in place) when beta != 0
  std::int64_t ldd = 0;
  DType d_type = DType::F32;
  float beta = 0.0f;
  const void* bias = nullptr;  // [m], of d_type; null = none
  GemmGelu gelu = GemmGelu::None;
  void* aux = nullptr;  // written by GemmGelu::Forward, read by Backward
  std::int64_t ld_aux = 0;
  void* bias_grad = nullptr;  // [n], of d_type: sum over k of op(B)[k, j], written (not accumulated);
                              // BGRADB, without bias or GELU
};

// Enqueues the matmul on ctx.stream. Returns false, enqueuing nothing, when the epilogue's operands are
// not as gemm.cu takes them (bias, bias_grad and aux 16-byte aligned; ld_aux a multiple of 8 and >= m, as cuBLASLt
// documents) or cuBLASLt offers no algorithm for it: the caller falls back (a bias broadcast, our GELU
// kernels, after a plain GEMM). Throws on any other failure. m, n, k must be positive.
bool try_gemm(const LaunchContext& ctx, const GemmArgs& g);

// try_gemm that throws std::runtime_error when no algorithm exists.
void gemm(const LaunchContext& ctx, const GemmArgs& g);

}  // namespace ptrain::kernels::cuda
