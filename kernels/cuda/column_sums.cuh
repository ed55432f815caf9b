// Deterministic column sums for parameter gradients: out_k[c] += sum over rows r < R of f(r, c)[k],
// for K (1 or 2) outputs at once (layernorm's d_weight and d_bias share one pass over the rows).
// Used by linear (d_bias) and the norms (d_weight, d_bias).
//
// Pass 1: a 2D grid of (32 columns) x (a split of the rows); the block's 8 row lanes each walk every
// 8th row of the split, then sum their partials in lane order into a [splits, K, C] scratch. Pass 2:
// one warp per column: lane l adds splits l, l + 32, ... in double, then the lanes' sums meet in a
// fixed shuffle tree, and lane 0 adds the total to the output. No atomics: the result depends only on
// (R, C), never on timing. The split count depends on R only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"

namespace ptrain::kernels::cuda {

inline constexpr int kColumnTile = 32;  // columns per block: one warp reads a row segment
inline constexpr int kColumnLanes = 8;  // row lanes per block
inline constexpr int kColumnMinRowsPerSplit = 64;
inline constexpr int kColumnMaxSplits = 256;

// The outputs of a column sum; a null entry is skipped (e.g. layernorm without a bias).
template <int K, typename G>
struct ColumnOutputs {
  G* out[K];
};

template <int K, typename F>
__global__ void column_partials_kernel(F f, int R, int C, int rows_per_split, float* partial) {
  const int c = static_cast<int>(blockIdx.x) * kColumnTile + static_cast<int>(threadIdx.x);
  const int r_begin = static_cast<int>(blockIdx.y) * rows_per_split;
  const int r_end = min(R, r_begin + rows_per_split);
  float acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < C) {
    for (int r = r_begin + static_cast<int>(threadIdx.y); r < r_end; r += kColumnLanes) {
      float v[K];
      f(r, c, v);
      for (int k = 0; k < K; ++k) acc[k] += v[k];
    }
  }
  __shared__ float lanes[K][kColumnLanes][kColumnTile];
  for (int k = 0; k < K; ++k) lanes[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int y = 0; y < kColumnLanes; ++y) s += lanes[k][y][threadIdx.x];
      partial[(std::size_t{blockIdx.y} * K + k) * C + c] = s;
    }
  }
}

template <int K, typename G>
__global__ void column_finish_kernel(const float* partial, int splits, int C, ColumnOutputs<K, G> outs) {
  const int c = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);  // one warp per column
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (c >= C) return;  // the whole warp leaves together
  for (int k = 0; k < K; ++k) {
    G* out = outs.out[k];
    if (out == nullptr) continue;
    double s = 0.0;
    for (int split = lane; split < splits; split += 32)
      s += partial[(static_cast<std::size_t>(split) * K + k) * C + c];
    s = warp_sum(s);
    if (lane == 0) store_f32(out + c, to_f32(out[c]) + static_cast<float>(s));
  }
}

// f: a functor with `__device__ void operator()(int r, int c, float (&v)[K]) const`.
template <int K, typename G, typename F>
void column_sums_accumulate(const LaunchContext& ctx, ColumnOutputs<K, G> outs, const F& f, int R, int C) {
  if (R <= 0 || C <= 0) return;
  const int splits = std::min((R + kColumnMinRowsPerSplit - 1) / kColumnMinRowsPerSplit, kColumnMaxSplits);
  const int rows_per_split = (R + splits - 1) / splits;
  Scratch<float> partial(ctx, static_cast<std::size_t>(splits) * K * static_cast<std::size_t>(C));
  const dim3 grid(static_cast<unsigned>((C + kColumnTile - 1) / kColumnTile), static_cast<unsigned>(splits));
  const dim3 block(kColumnTile, kColumnLanes);
  column_partials_kernel<K><<<grid, block, 0, ctx.stream>>>(f, R, C, rows_per_split, partial.get());
  PTRAIN_CUDA_CHECK_LAUNCH();
  constexpr int kColumnsPerBlock = kBlock / 32;
  column_finish_kernel<K, G>
      <<<static_cast<unsigned>((C + kColumnsPerBlock - 1) / kColumnsPerBlock), kBlock, 0, ctx.stream>>>(
          partial.get(), splits, C, outs);
  PTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace ptrain::kernels::cuda
