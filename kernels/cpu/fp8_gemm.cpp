// The FP8 GEMMs on the CPU (ops.h: fp8_gemm, fp8_gemm_gelu): each operand's codes decoded to their
// values times the inverse scale (exact: an FP8 value times a power of two, barring fp32 underflow),
// then linear_forward's GEMM (gemm.h) over them, the output staged as there (bf16_staging.h). The
// decoded operands are the very floats fp8_round leaves, so this equals the linear ops over
// fp8_round's operands bit for bit; a GPU's FP8 GEMM multiplies the codes and scales the FP32 sums,
// which differs from this by the order of the sums only (docs/fp8.md).
#include <array>
#include <cstdint>
#include <memory>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

// n codes of `codes` (E4M3 or E5M2) as floats times inv_scale[0].
std::unique_ptr<float[]> decode(Buf codes, Buf inv_scale, std::int64_t n) {
  const Fp8Format format = fp8_format(codes.dtype);
  const float inv = *cf32(inv_scale);
  std::array<float, 256> value{};
  for (int c = 0; c < 256; ++c) value[static_cast<std::size_t>(c)] = fp8_to_f32(static_cast<std::uint8_t>(c), format) * inv;
  auto out = std::make_unique<float[]>(static_cast<std::size_t>(n));
  const auto* in = codes.as<const std::uint8_t>();
  float* o = out.get();
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t count) {
    for (std::int64_t i = begin; i < begin + count; ++i) o[i] = value[in[i]];
  });
  return out;
}

void gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K, bool accumulate) {
  if (M == 0 || N == 0) return;
  const std::unique_ptr<float[]> a_values = decode(a, a_inv_scale, std::int64_t{M} * K);
  const std::unique_ptr<float[]> b_values = decode(b, b_inv_scale, std::int64_t{N} * K);
  Bf16Staging staging;
  out = staging.output(out, std::int64_t{M} * N);
  bias = staging.input(bias, N);
  gemm_nt(f32(out), a_values.get(), b_values.get(), cf32(bias), M, N, K, accumulate);
}

}  // namespace

void fp8_gemm(Buf out, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N, int K,
              bool accumulate) {
  check_fp8_gemm("cpu", out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, accumulate);
  gemm(out, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, accumulate);
}

void fp8_gemm_gelu(Buf out, Buf pre, Buf a, Buf b, Buf a_inv_scale, Buf b_inv_scale, Buf bias, int M, int N,
                   int K, Buf amax) {
  check_fp8_gemm_gelu("cpu", out, pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K);
  check_output_amax("cpu", "fp8_gemm_gelu", amax);
  gemm(pre, a, b, a_inv_scale, b_inv_scale, bias, M, N, K, false);
  gelu_forward(out, pre, std::int64_t{M} * N, amax);
}

}  // namespace ptrain::kernels::cpu
