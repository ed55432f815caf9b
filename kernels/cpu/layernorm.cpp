// LayerNorm over the last dim of [N, C]: out = (x - mean) * rstd * weight + bias, with the biased
// variance (as torch.nn.LayerNorm) and rstd = 1/sqrt(var + eps). Forward saves mean and rstd [N].
// Backward (d_in accumulates, as ops.h documents):
//   xhat = (x - mean) rstd, g = d_out * weight
//   d_in += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
//   d_weight += sum_n d_out * xhat, d_bias += sum_n d_out
// Rows are independent (OpenMP over rows). The parameter gradients are summed per fixed block of
// rows into scratch, then the blocks in order: reproducible for any thread count.
// add_layernorm_forward runs the forward's own row loop with the residual add in front of each row
// (residual_add.h): the add then the norm, bit for bit, in one pass.
// Dtypes as on CUDA (layernorm.cu): in, out, d_out, d_in one type X; weight and bias one type W;
// d_weight and d_bias one type G; each F32 or BF16. BF16 buffers are staged (bf16_staging.h).
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

// The forward over the rows of x_all (F32: staged by the entry), for layernorm_forward and
// add_layernorm_forward. With `residual`, row n of x_all is first written as a + b, then normalised by
// the same code as the plain norm's rows.
void forward_rows(Bf16Staging& staging, Buf out, Buf mean, Buf rstd, const float* x_all, Buf weight, Buf bias,
                  int N, int C, float eps, const ResidualAdd* residual, OutputAmax& amax) {
  float* o = f32(staging.output(out, std::int64_t{N} * C));
  float* mu_out = mean ? f32(mean) : nullptr;
  float* rs_out = rstd ? f32(rstd) : nullptr;
  const float* w = cf32(staging.input(weight, C));
  const float* b = bias ? cf32(staging.input(bias, C)) : nullptr;
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (std::int64_t{N} * C >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    if (residual) residual->apply(n * C, C);
    const float* x = x_all + n * C;
    float* y = o + n * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < C; ++c) sum += x[c];
    const float mu = sum * inv_c;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < C; ++c) {
      const float d = x[c] - mu;
      sq += d * d;
    }
    const float rs = 1.0f / std::sqrt(sq * inv_c + eps);
    if (b) {
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) y[c] = (x[c] - mu) * rs * w[c] + b[c];
    } else {
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) y[c] = (x[c] - mu) * rs * w[c];
    }
    amax.fold(n, y, C);
    if (mu_out) mu_out[n] = mu;
    if (rs_out) rs_out[n] = rs;
  }
}

}  // namespace

void layernorm_forward(Buf out, Buf mean, Buf rstd, Buf in, Buf weight, Buf bias, int N, int C, float eps,
                       Buf amax) {
  check_layernorm_forward("cpu", out, mean, rstd, in, weight, bias, N, C);
  check_output_amax("cpu", "layernorm_forward", amax);
  Bf16Staging staging;
  const float* x = cf32(staging.input(in, std::int64_t{N} * C));
  OutputAmax out_amax(amax, out, N);
  forward_rows(staging, out, mean, rstd, x, weight, bias, N, C, eps, nullptr, out_amax);
  out_amax.write();
}

void add_layernorm_forward(Buf x_out, Buf out, Buf mean, Buf rstd, Buf a, Buf b, Buf weight, Buf bias, int N,
                           int C, float eps, Buf amax) {
  check_add_layernorm_forward("cpu", x_out, out, mean, rstd, a, b, weight, bias, N, C);
  check_output_amax("cpu", "add_layernorm_forward", amax);
  Bf16Staging staging;
  const ResidualAdd residual(staging, x_out, a, b, std::int64_t{N} * C);
  OutputAmax out_amax(amax, out, N);
  forward_rows(staging, out, mean, rstd, residual.sums(), weight, bias, N, C, eps, &residual, out_amax);
  out_amax.write();
}

void layernorm_backward(Buf d_in, Buf d_weight, Buf d_bias, Buf d_out, Buf in, Buf weight, Buf mean, Buf rstd,
                        int N, int C) {
  check_layernorm_backward("cpu", d_in, d_weight, d_bias, d_out, in, weight, mean, rstd, N, C);
  if (N == 0 || C == 0) return;
  const std::int64_t NC = std::int64_t{N} * C;
  Bf16Staging staging;
  float* dx_all = d_in ? f32(staging.output(d_in, NC)) : nullptr;
  d_weight = staging.output(d_weight, C);
  d_bias = staging.output(d_bias, C);
  const float* dy_all = cf32(staging.input(d_out, NC));
  const float* x_all = cf32(staging.input(in, NC));
  const float* w = cf32(staging.input(weight, C));
  const float* mu_all = cf32(mean);
  const float* rs_all = cf32(rstd);
  const bool want_params = d_weight || d_bias;
  const std::int64_t blocks = (std::int64_t{N} + kRowsPerBlock - 1) / kRowsPerBlock;
  // Per-block partial sums: [blocks, C] for d_weight then [blocks, C] for d_bias.
  std::unique_ptr<float[]> partial;
  if (want_params)
    partial = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(2 * blocks * C));
  float* pw_all = partial.get();
  float* pb_all = want_params ? pw_all + blocks * C : nullptr;
  const float inv_c = 1.0f / static_cast<float>(C);

#pragma omp parallel for schedule(static) if (std::int64_t{N} * C >= kParallelMinElements)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    float* pw = want_params ? pw_all + blk * C : nullptr;
    float* pb = want_params ? pb_all + blk * C : nullptr;
    if (want_params) {
      for (std::int64_t c = 0; c < C; ++c) pw[c] = pb[c] = 0.0f;
    }
    const std::int64_t n_end = std::min<std::int64_t>(N, (blk + 1) * kRowsPerBlock);
    for (std::int64_t n = blk * kRowsPerBlock; n < n_end; ++n) {
      const float* x = x_all + n * C;
      const float* dy = dy_all + n * C;
      const float mu = mu_all[n];
      const float rs = rs_all[n];
      if (dx_all) {
        float sum_g = 0.0f;
        float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (std::int64_t c = 0; c < C; ++c) {
          const float g = dy[c] * w[c];
          sum_g += g;
          sum_gx += g * (x[c] - mu) * rs;
        }
        const float mean_g = sum_g * inv_c;
        const float mean_gx = sum_gx * inv_c;
        float* dx = dx_all + n * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
          const float xhat = (x[c] - mu) * rs;
          dx[c] += rs * (dy[c] * w[c] - mean_g - xhat * mean_gx);
        }
      }
      if (want_params) {
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
          pw[c] += dy[c] * ((x[c] - mu) * rs);
          pb[c] += dy[c];
        }
      }
    }
  }
  if (d_weight) column_sums_accumulate(f32(d_weight), pw_all, blocks, C);
  if (d_bias) column_sums_accumulate(f32(d_bias), pb_all, blocks, C);
}

}  // namespace ptrain::kernels::cpu
