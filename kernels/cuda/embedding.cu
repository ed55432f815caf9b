// Token (+ learned position) embedding: out[n,:] = table[tokens[n],:] + positions[n % T,:].
// Dtypes: out, table and positions share one element type (F32 or BF16); in backward d_out is F32 or
// BF16 and d_table, d_positions share one type (F32 or BF16; sums are fp32).
//
// Token ids live on the device, so the op cannot reject a negative id without a host round trip (the
// CPU op throws): a negative id gives a NaN output row, which the engine's loss check catches, and is
// skipped in backward; but for kRowElsewhere, a row another tensor-parallel rank holds (ops.h), which
// gives the position row alone (or zeros) and is skipped in backward too. Ids >= the table's rows are the
// data loader's job (ops.h), as on the CPU.
//
// Backward is deterministic and bitwise equal to the CPU's F32 sums: every d_table/d_positions element
// is written by one thread that adds its contributions in token order, starting from the old value.
//  - d_positions[t,c]: one thread per (t, c) walks n = t, t+T, ...
//  - d_table: the (token, n) pairs are radix-sorted by token (CUB; stable, so equal tokens keep n
//    order); the first entry of each run of equal tokens owns the row and sums the run's d_out rows.
//    Scratch: 4 int arrays of N plus CUB's temporaries, stream-ordered. A very frequent token makes
//    one long serial run (its cost is one pass over its rows, no slower than the CPU per column).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"
#include "kernels/ops.h"

namespace ptrain::kernels::cuda {
namespace {

template <typename T>
struct EmbeddingGather {
  T* out;
  const std::int32_t* tokens;
  const T* table;
  const T* positions;  // may be null
  int T_len;
  int C;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t n = i / C;
    const std::int64_t c = i % C;
    const std::int32_t tok = tokens[n];
    if (tok == kRowElsewhere) {  // another tp rank adds the table row
      store_f32(out + i, positions != nullptr ? to_f32(positions[(n % T_len) * C + c]) : 0.0f);
      return;
    }
    if (tok < 0) {
      store_f32(out + i, __int_as_float(0x7fc00000));  // quiet NaN: a bad id must not pass silently
      return;
    }
    float v = to_f32(table[std::int64_t{tok} * C + c]);
    if (positions != nullptr) v += to_f32(positions[(n % T_len) * C + c]);
    store_f32(out + i, v);
  }
};

template <typename G, typename Y>
struct PositionGrad {
  G* d_positions;
  const Y* d_out;
  int N;
  int T_len;
  int C;
  __device__ void operator()(std::int64_t i) const {  // i = t*C + c
    const std::int64_t t = i / C;
    const std::int64_t c = i % C;
    float acc = to_f32(d_positions[i]);
    for (std::int64_t n = t; n < N; n += T_len) acc += to_f32(d_out[n * C + c]);
    store_f32(d_positions + i, acc);
  }
};

struct Iota {
  std::int32_t* out;
  __device__ void operator()(std::int64_t i) const { out[i] = static_cast<std::int32_t>(i); }
};

// Grid: x = position i in the sorted order, y = chunk of columns. Only the first entry of a run of
// equal tokens does work.
template <typename G, typename Y>
__global__ void table_grad_kernel(G* d_table, const Y* d_out, const std::int32_t* sorted_tokens,
                                  const std::int32_t* sorted_rows, int N, int C) {
  const int i = static_cast<int>(blockIdx.x);
  const std::int64_t c = std::int64_t{blockIdx.y} * blockDim.x + threadIdx.x;
  const std::int32_t tok = sorted_tokens[i];
  if (c >= C || tok < 0 || (i > 0 && sorted_tokens[i - 1] == tok)) return;
  G* dst = d_table + std::int64_t{tok} * C + c;
  float acc = to_f32(*dst);
  for (int j = i; j < N && sorted_tokens[j] == tok; ++j)
    acc += to_f32(d_out[std::int64_t{sorted_rows[j]} * C + c]);
  store_f32(dst, acc);
}

template <typename G, typename Y>
void table_grad(const LaunchContext& ctx, G* d_table, const Y* d_out, const std::int32_t* tokens, int N,
                int C) {
  Scratch<std::int32_t> rows_in(ctx, static_cast<std::size_t>(N));
  Scratch<std::int32_t> rows_sorted(ctx, static_cast<std::size_t>(N));
  Scratch<std::int32_t> tokens_sorted(ctx, static_cast<std::size_t>(N));
  launch_map(ctx.stream, N, Iota{rows_in.get()});
  std::size_t temp_bytes = 0;
  PTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, tokens_sorted.get(),
                                                    rows_in.get(), rows_sorted.get(), N, 0, 32, ctx.stream));
  Scratch<unsigned char> temp(ctx, temp_bytes > 0 ? temp_bytes : 1);  // a null pointer would only size again
  PTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, tokens, tokens_sorted.get(),
                                                    rows_in.get(), rows_sorted.get(), N, 0, 32, ctx.stream));
  const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>((C + kBlock - 1) / kBlock));
  table_grad_kernel<<<grid, kBlock, 0, ctx.stream>>>(d_table, d_out, tokens_sorted.get(), rows_sorted.get(),
                                                     N, C);
  PTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(const LaunchContext& ctx, Buf out, Buf tokens, Buf table, Buf positions, int N, int T,
                       int C) {
  check_embedding_forward("cuda", out, tokens, table, positions, N, T, C);
  if (N == 0 || C == 0) return;
  dispatch_float(out.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    launch_map(ctx.stream, std::int64_t{N} * C,
               EmbeddingGather<E>{typed<E>(out), typed<const std::int32_t>(tokens), typed<const E>(table),
                                  positions ? typed<const E>(positions) : nullptr, T, C});
  });
}

void embedding_backward(const LaunchContext& ctx, Buf d_table, Buf d_positions, Buf d_out, Buf tokens, int N,
                        int T, int C) {
  check_embedding_backward("cuda", d_table, d_positions, d_out, tokens, N, T, C);
  if (N == 0 || C == 0) return;
  const DType grad_type = d_table ? d_table.dtype : d_positions.dtype;
  dispatch_float(d_out.dtype, [&](auto* y_tag) {
    using Y = std::remove_pointer_t<decltype(y_tag)>;
    dispatch_float(grad_type, [&](auto* g_tag) {
      using G = std::remove_pointer_t<decltype(g_tag)>;
      if (d_positions) {
        launch_map(ctx.stream, std::int64_t{T} * C,
                   PositionGrad<G, Y>{typed<G>(d_positions), typed<const Y>(d_out), N, T, C});
      }
      if (d_table)
        table_grad(ctx, typed<G>(d_table), typed<const Y>(d_out), typed<const std::int32_t>(tokens), N, C);
    });
  });
}

}  // namespace ptrain::kernels::cuda
