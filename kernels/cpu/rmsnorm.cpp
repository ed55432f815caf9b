// RMSNorm over the last dim of [N, C] (Llama): out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) +
// eps). Forward saves rstd [N]. Backward (d_in accumulates, as ops.h documents):
//   xhat = x rstd, g = d_out * weight
//   d_in += rstd * (g - xhat * mean_c(g * xhat)),   d_weight += sum_n d_out * xhat
// Same structure and dtype rules as layernorm.cpp: rows in parallel, weight gradient via per-block
// partials; activations X, weight W and d_weight G each F32 or BF16 (staged, bf16_staging.h).
// add_rmsnorm_forward: the forward's row loop with the residual add in front of each row, as
// add_layernorm_forward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/output_amax.h"
#include "kernels/cpu/residual_add.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

constexpr std::int64_t kRowsPerBlock = 32;

// The forward over the rows of x_all (F32: staged by the entry), for rmsnorm_forward and
// add_rmsnorm_forward. With `residual`, row n of x_all is first written as a + b, then normalised by
// the same code as the plain norm's rows.
void forward_rows(Bf16Staging& staging, Buf out, Buf rstd, const float* x_all, Buf weight, int N, int C,
                  float eps, const ResidualAdd* residual, OutputAmax& amax) {
  float* o = f32(staging.output(out, std::int64_t{N} * C));
  float* rs_out = rstd ? f32(rstd) : nullptr;
  const float* w = cf32(staging.input(weight, C));
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (std::int64_t{N} * C >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    if (residual) residual->apply(n * C, C);
    const float* x = x_all + n * C;
    float* y = o + n * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < C; ++c) sq += x[c] * x[c];
    const float rs = 1.0f / std::sqrt(sq * inv_c + eps);
#pragma omp simd
    for (std::int64_t c = 0; c < C; ++c) y[c] = x[c] * rs * w[c];
    amax.fold(n, y, C);
    if (rs_out) rs_out[n] = rs;
  }
}

}  // namespace

void rmsnorm_forward(Buf out, Buf rstd, Buf in, Buf weight, int N, int C, float eps, Buf amax) {
  check_rmsnorm_forward("cpu", out, rstd, in, weight, N, C);
  check_output_amax("cpu", "rmsnorm_forward", amax);
  Bf16Staging staging;
  const float* x = cf32(staging.input(in, std::int64_t{N} * C));
  OutputAmax out_amax(amax, out, N);
  forward_rows(staging, out, rstd, x, weight, N, C, eps, nullptr, out_amax);
  out_amax.write();
}

void add_rmsnorm_forward(Buf x_out, Buf out, Buf rstd, Buf a, Buf b, Buf weight, int N, int C, float eps,
                         Buf amax) {
  check_add_rmsnorm_forward("cpu", x_out, out, rstd, a, b, weight, N, C);
  check_output_amax("cpu", "add_rmsnorm_forward", amax);
  Bf16Staging staging;
  const ResidualAdd residual(staging, x_out, a, b, std::int64_t{N} * C);
  OutputAmax out_amax(amax, out, N);
  forward_rows(staging, out, rstd, residual.sums(), weight, N, C, eps, &residual, out_amax);
  out_amax.write();
}

void rmsnorm_backward(Buf d_in, Buf d_weight, Buf d_out, Buf in, Buf weight, Buf rstd, int N, int C) {
  check_rmsnorm_backward("cpu", d_in, d_weight, d_out, in, weight, rstd, N, C);
  if (N == 0 || C == 0) return;
  const std::int64_t NC = std::int64_t{N} * C;
  Bf16Staging staging;
  float* dx_all = d_in ? f32(staging.output(d_in, NC)) : nullptr;
  d_weight = staging.output(d_weight, C);
  const float* dy_all = cf32(staging.input(d_out, NC));
  const float* x_all = cf32(staging.input(in, NC));
  const float* w = cf32(staging.input(weight, C));
  const float* rs_all = cf32(rstd);
  const std::int64_t blocks = (std::int64_t{N} + kRowsPerBlock - 1) / kRowsPerBlock;
  std::unique_ptr<float[]> partial;
  if (d_weight) partial = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(blocks * C));
  float* pw_all = partial.get();
  const float inv_c = 1.0f / static_cast<float>(C);

#pragma omp parallel for schedule(static) if (std::int64_t{N} * C >= kParallelMinElements)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    float* pw = pw_all ? pw_all + blk * C : nullptr;
    if (pw) std::fill(pw, pw + C, 0.0f);
    const std::int64_t n_end = std::min<std::int64_t>(N, (blk + 1) * kRowsPerBlock);
    for (std::int64_t n = blk * kRowsPerBlock; n < n_end; ++n) {
      const float* x = x_all + n * C;
      const float* dy = dy_all + n * C;
      const float rs = rs_all[n];
      if (dx_all) {
        float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
        for (std::int64_t c = 0; c < C; ++c) sum_gx += dy[c] * w[c] * (x[c] * rs);
        const float mean_gx = sum_gx * inv_c;
        float* dx = dx_all + n * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) dx[c] += rs * (dy[c] * w[c] - (x[c] * rs) * mean_gx);
      }
      if (pw) {
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) pw[c] += dy[c] * (x[c] * rs);
      }
    }
  }
  if (d_weight) column_sums_accumulate(f32(d_weight), pw_all, blocks, C);
}

}  // namespace ptrain::kernels::cpu
