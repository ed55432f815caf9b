// The FP8 GEMMs on CUDA (ops.h: fp8_gemm, fp8_gemm_gelu) on cuBLASLt (gemm.cuh), sm_89 and sm_90:
//   out^T[N,M] = (b stored [K,N] column-major, op T) . (a stored [K,M], op N) * a_scale * b_scale
// -- row-major out = a b^T with both operands K-contiguous, cuBLASLt FP8's one layout ("TN") -- the
// scales being device pointers to the inverse scales fp8_cast wrote (A_SCALE_POINTER: cuBLASLt's A
// is our b). FP32 accumulation; `sums` (kernels/fp8.h) sets FAST_ACCUM: Promoted (0) adds the tensor
// cores' partial sums (fixed point, about 14 bits) into FP32 periodically, so the GPU's sums are near
// the CPU's plain FP32 ones; Fast (1) leaves them at reduced precision for the whole K (the bounds
// tests/kernels/cuda/fp8_gemm_test.cpp states for each). BF16 or F32 output; beta 1 accumulates (the
// weight gradient); the bias in the BIAS epilogue where cuBLASLt takes it (BF16 outputs: for an F32 output
// cuBLASLt's FP8 kernels read the bias as BF16, gemm.cu), else broadcast into out first (as
// linear_forward). GELU: fp8_gemm_gelu puts it in the epilogue (GELU_AUX[_BIAS], pre as
// the aux matrix) for BF16 outputs where cuBLASLt offers it, else the GEMM then gelu_forward, as
// linear_gelu_forward. The backward's gelu' is not fused: cuBLASLt's DGELU epilogue is not among
// those its FP8 kernels document, and BlockLinears runs gelu_backward after the GEMM on every
// backend (the CPU's order).
//
// fp8_gemm_gelu's `amax` (of out): on the unfused path folded into gelu_forward's stores; after the
// GELU epilogue, one extra abs_max pass over out (linear.cu's forward_gelu). Not cuBLASLt's
// CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: cuBLASLt computes AMAX_D only for the type combinations it
// supports (cublasLt.h: set for another, cublasLtMatmul "will return CUBLAS_INVALID_VALUE"), and
// neither cublasLt.h nor the documentation we found (nvmath-python's result_amax: "Only supported for
// narrow-precision (FP8 and lower) operations") lists a BF16 or F32 D with the GELU_AUX epilogue among
// them; besides, its value "has the same type as the compute type": the largest |fp32 result| before
// D's rounding, where ops.h asks for out's as stored (bit for bit abs_max's).
//
// Limits of this implementation (not of the op's contract; validate refuses such jobs at the key,
// engine/config: fp8_gemm_shape_refusal): M, N, K multiples of 16 and every operand 16-byte aligned,
// which cuBLASLt's FP8 kernels require (leading dimensions of 16 bytes; FP8 A and B).
#include <cstdint>
#include <string>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cuda {
namespace {

bool aligned16(Buf b) { return !b || reinterpret_cast<std::uintptr_t>(b.ptr) % 16 == 0; }

void require_fp8_shape(const char* op, Buf out, Buf a, Buf b, int M, int N, int K) {
  if (M % 16 != 0 || N % 16 != 0 || K % 16 != 0)
    fail("cuda", op,
         "M, N, K must be multiples of 16 for cuBLASLt's FP8 GEMMs, got " + std::to_string(M) + ", " +
             std::to_string(N) + ", " + std::to_string(K));
  require(aligned16(out) && aligned16(a) && aligned16(b), "cuda", op,
          "out, a and b must be 16-byte aligned for cuBLASLt's FP8 GEMMs");
}

// linear_forward's GEMM (linear.cuh) over the codes: cuBLASLt's A is b (the weight's place), its B a.
GemmArgs fp8_gemm_args(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, int M, int N, int K,
                       Fp8Sums sums) {
  GemmArgs g = forward_gemm(out, a, b, M, N, K);
  g.fp8_fast_accum = sums == Fp8Sums::Fast;
  g.a_type = b.dtype;
  g.a_scale = typed<const float>(b_inv_scale);
  g.b_type = a.dtype;
  g.b_scale = typed<const float>(a_inv_scale);
  return g;
}

}  // namespace

void fp8_gemm(const LaunchContext& ctx, Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M,
              int N, int K, bool accumulate, Fp8Sums sums) {
  check_fp8_gemm("cuda", out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, accumulate);
  require_fp8_shape("fp8_gemm", out, a, b, M, N, K);
  GemmArgs g = fp8_gemm_args(out, a, b, a_inv_scale, b_inv_scale, M, N, K, sums);
  g.beta = accumulate ? 1.0f : 0.0f;
  forward_with_bias(ctx, g, out, bias, M, N, K);
}

void fp8_gemm_gelu(const LaunchContext& ctx, Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale,
                   Buf bias, int M, int N, int K, Fp8Sums sums, Buf amax) {
  check_fp8_gemm_gelu("cuda", out, pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K);
  require_fp8_shape("fp8_gemm_gelu", pre, a, b, M, N, K);
  check_output_amax("cuda", "fp8_gemm_gelu", amax);
  zero_amax(ctx, amax);  // an empty out leaves it 0, as abs_max over nothing
  forward_gelu(ctx, fp8_gemm_args(out, a, b, a_inv_scale, b_inv_scale, M, N, K, sums), out, pre, bias, M, N, K,
               amax);
}

}  // namespace ptrain::kernels::cuda
