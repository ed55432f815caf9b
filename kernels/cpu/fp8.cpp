// FP8 on the CPU (ops.h: abs_max, fp8_round, fp8_cast): kernels/fp8.h's casts applied to F32 or BF16
// tensors (BF16 staged, bf16_staging.h). The amax combines chunks in a fixed order, so it does not
// depend on the thread count (a max is exact anyway; NaN is kept whatever the order).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"

namespace ptrain::kernels::cpu {
namespace {

// to[c, r] = from[r, c] for from [rows, cols], in square tiles (both sides' lines stay in cache),
// a band of tiles per thread.
void transpose_bytes(std::uint8_t* to, const std::uint8_t* from, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t kTile = 64;
  const std::int64_t bands = (rows + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements)
  for (std::int64_t band = 0; band < bands; ++band) {
    const std::int64_t r0 = band * kTile, r1 = std::min(rows, r0 + kTile);
    for (std::int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const std::int64_t c1 = std::min(cols, c0 + kTile);
      for (std::int64_t c = c0; c < c1; ++c)
        for (std::int64_t r = r0; r < r1; ++r) to[c * rows + r] = from[r * cols + c];
    }
  }
}

}  // namespace

void abs_max(Buf amax, Buf x, std::int64_t n, bool combine) {
  check_abs_max("cpu", amax, x, n);
  Bf16Staging staging;
  const float* p = cf32(staging.input(x, n));
  std::vector<float> partial(static_cast<std::size_t>(parallel_chunk_count(n)));
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t count) {
    partial[static_cast<std::size_t>(begin / kParallelChunk)] = kernels::abs_max(p + begin, count);
  });
  if (combine) partial.push_back(*cf32(amax));
  *f32(amax) = kernels::abs_max(partial.data(), static_cast<std::int64_t>(partial.size()));
}

void fp8_round(Buf out, Buf x, Buf amax, std::int64_t n, Fp8Format format) {
  check_fp8_round("cpu", out, x, amax, n);
  const float scale = fp8_scale(*cf32(amax), format);
  const float unscale = 1.0f / scale;  // exact: a power of two
  Bf16Staging staging;
  const float* in = cf32(staging.input(x, n));
  float* o = f32(staging.output(out, n));
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t count) {
    for (std::int64_t i = begin; i < begin + count; ++i)
      o[i] = fp8_to_f32(f32_to_fp8(in[i] * scale, format), format) * unscale;
  });
}

void fp8_cast(Buf out, Buf out_t, Buf inv_scale, Buf record, Buf x, Buf amax, std::int64_t rows, std::int64_t cols) {
  check_fp8_cast("cpu", out, out_t, inv_scale, record, x, amax, rows, cols);
  const std::int64_t n = rows * cols;
  const Fp8Format format = fp8_format(out ? out.dtype : out_t.dtype);
  const float scale = fp8_scale(*cf32(amax), format);
  Bf16Staging staging;
  const float* in = cf32(staging.input(x, n));
  // The codes in x's layout (into out, or aside when only the transpose is wanted), with the amax of
  // each chunk: record's, in a fixed order as abs_max takes it.
  std::vector<std::uint8_t> aside(out ? 0 : static_cast<std::size_t>(n));
  std::uint8_t* codes = out ? out.as<std::uint8_t>() : aside.data();
  std::vector<float> partial(static_cast<std::size_t>(parallel_chunk_count(n)));
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t count) {
    partial[static_cast<std::size_t>(begin / kParallelChunk)] =
        cast_to_fp8(codes + begin, in + begin, count, scale, format);
  });
  if (out_t) transpose_bytes(out_t.as<std::uint8_t>(), codes, rows, cols);
  *f32(inv_scale) = 1.0f / scale;  // exact: a power of two
  if (record) {
    partial.push_back(*cf32(record));
    *f32(record) = kernels::abs_max(partial.data(), static_cast<std::int64_t>(partial.size()));
  }
}

}  // namespace ptrain::kernels::cpu
