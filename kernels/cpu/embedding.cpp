// Token (+ learned position) embedding: out[n,:] = table[tokens[n],:] + positions[n % T,:].
// Token ids must be valid rows of the table (the data loader bounds-checks them against the
// vocabulary; the op only rejects negative ids, as it is not told the table's row count), but for
// kRowElsewhere: a row another tensor-parallel rank holds, which adds nothing here (ops.h).
// Backward scatters into the tables; columns are split across threads so that repeated tokens never
// race and every row's sum is taken in token order (bitwise reproducible for any thread count).
// Dtypes as on CUDA (embedding.cu): out, table, positions share one type; in backward d_out is
// either, d_table and d_positions share one. BF16 buffers are staged (bf16_staging.h); of a BF16
// table only the rows the tokens pick, since the row count is unknown.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cpu/bf16_staging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_checks.h"
#include "kernels/ops.h"

namespace ptrain::kernels::cpu {
namespace {

// The contract's one check of values (ops.h): done here because the CPU reads the ids where they are;
// the CUDA op cannot without a host round trip (kernels/cuda/embedding.cu).
void require_tokens_nonnegative(const char* op, const std::int32_t* tokens, std::int64_t N) {
  for (std::int64_t n = 0; n < N; ++n) {
    if (tokens[n] < 0 && tokens[n] != kRowElsewhere)
      fail("cpu", op, "negative token id " + std::to_string(tokens[n]));
  }
}

}  // namespace

void embedding_forward(Buf out, Buf tokens, Buf table, Buf positions, int N, int T, int C) {
  constexpr const char* op = "embedding_forward";
  check_embedding_forward("cpu", out, tokens, table, positions, N, T, C);
  require_tokens_nonnegative(op, ci32(tokens), N);
  Bf16Staging staging;
  const Bf16Staging::Rows rows = staging.input_rows(table, tokens, N, C);
  const std::int32_t* tok = ci32(rows.ids);
  float* o = f32(staging.output(out, std::int64_t{N} * C));
  const float* tab = cf32(rows.table);
  const float* pos = positions ? cf32(staging.input(positions, std::int64_t{T} * C)) : nullptr;
#pragma omp parallel for schedule(static) if (std::int64_t{N} * C >= kParallelMinElements)
  for (std::int64_t n = 0; n < N; ++n) {
    float* orow = o + n * C;
    if (tok[n] == kRowElsewhere) {  // another tp rank adds the row
      if (pos)
        std::copy(pos + (n % T) * C, pos + (n % T + 1) * C, orow);
      else
        std::fill(orow, orow + C, 0.0f);
      continue;
    }
    const float* trow = tab + std::int64_t{tok[n]} * C;
    if (pos) {
      const float* prow = pos + (n % T) * C;
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) orow[c] = trow[c] + prow[c];
    } else {
      std::copy(trow, trow + C, orow);
    }
  }
}

void embedding_backward(Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N, int T, int C) {
  constexpr const char* op = "embedding_backward";
  check_embedding_backward("cpu", d_table, d_positions, d_out, tokens, N, T, C);
  require_tokens_nonnegative(op, ci32(tokens), N);
  Bf16Staging staging;
  const Bf16Staging::Rows rows = staging.output_rows(d_table, tokens, N, C);
  const std::int32_t* tok = ci32(rows.ids);
  float* dt = d_table ? f32(rows.table) : nullptr;
  float* dp = d_positions ? f32(staging.output(d_positions, std::int64_t{T} * C)) : nullptr;
  const float* dy = cf32(staging.input(d_out, std::int64_t{N} * C));
  constexpr std::int64_t kChunk = 64;  // columns per task
  const std::int64_t chunks = (std::int64_t{C} + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (std::int64_t{N} * C >= kParallelMinElements)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t c0 = chunk * kChunk;
    const std::int64_t width = std::min(kChunk, std::int64_t{C} - c0);
    for (std::int64_t n = 0; n < N; ++n) {
      const float* g = dy + n * C + c0;
      if (dt && tok[n] != kRowElsewhere) {
        float* trow = dt + std::int64_t{tok[n]} * C + c0;
#pragma omp simd
        for (std::int64_t c = 0; c < width; ++c) trow[c] += g[c];
      }
      if (dp) {
        float* prow = dp + (n % T) * C + c0;
#pragma omp simd
        for (std::int64_t c = 0; c < width; ++c) prow[c] += g[c];
      }
    }
  }
}

}  // namespace ptrain::kernels::cpu
