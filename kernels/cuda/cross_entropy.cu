// Softmax cross-entropy over logits[N, Vp] fused with its gradient; columns [V, Vp) are padding.
// One block per row, fp32 math, rows read in 16-byte vectors where their alignment allows:
//   pass 1: an online (max, sum of e^{x - max}) over the row's V real columns, each thread over a
//           strided slice, then combined across the block; loss = log(sum) + max - x_target
//   pass 2: d_logits_v = e^{x_v - max} * (grad_scale / sum) - grad_scale [v == target], padding 0,
//           reading the row again (from L2)
// Nothing but the inputs and outputs is touched: no [N, Vp] fp32 temporary. d_logits may alias logits
// (every element is read and then written by the same thread, and x_target is read before the first
// barrier). A target < 0 gives loss 0 and a zero gradient row.
// A target >= V must throw like the CPU, but finding it on the host would cost a synchronisation
// per call: the kernel records the first such row (and its target) in ctx.bad_target, which the
// next copy_to_host reads back with its data and reports (ops.h).
// Dtypes: logits and d_logits share one element type (F32 or BF16); losses F32; targets I32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/op_checks.h"
#include "kernels/ops.h"

namespace ptrain::kernels::cuda {
namespace {

// ctx.bad_target packs (row << 32 | target) so that atomicMin keeps the lowest row with its target;
// every bit set means none.
constexpr unsigned long long kNoBadTarget = ~0ull;

// Records a target >= V (see ctx.bad_target).
__device__ void record_bad_target(unsigned long long* bad_target, std::int64_t row, std::int32_t target) {
  atomicMin(bad_target, static_cast<unsigned long long>(row) << 32 | static_cast<std::uint32_t>(target));
}

// Merges the running (max, sum of exp(x - max)) pair (m2, s2) into (m, s). Equal maxima (including
// both -inf, an all -inf slice) scale by exactly 1, so no exp(-inf - -inf) = NaN appears; a NaN sum
// stays NaN.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  s = s * (m == mx ? 1.0f : expf(m - mx)) + s2 * (m2 == mx ? 1.0f : expf(m2 - mx));
  m = mx;
}

// (max, sum) over the block, returned to every thread; blockDim.x a multiple of 32.
__device__ void block_max_sum(float& m, float& s) {
  __shared__ float warp_m[32];
  __shared__ float warp_s[32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  }
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  const bool real = lane < (blockDim.x >> 5);
  m = real ? warp_m[lane] : -INFINITY;
  s = real ? warp_s[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) {
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  }
}

// exp(x - m) as 2^(x log2 e - m log2 e): one fused multiply-add and the hardware exp2 (relative error
// ~1e-6 for |x - m| < 20, against ~1e-7 for expf at several times the instructions).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp_minus(float x, float m_log2e) {
  return exp2f(fmaf(x, kLog2e, -m_log2e));
}

// Rows are read in Packs of W elements (16-byte vectors where the rows allow, see forward_backward).
// Pass 2 re-reads the row pass 1 just read, from L2: the rows in flight (a few per SM) fit in it.
template <typename E, int W>
__global__ void cross_entropy_kernel(float* losses, E* d_logits, const E* logits, const std::int32_t* targets,
                                     int V, int Vp, float grad_scale, unsigned long long* bad_target) {
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  E* dl = d_logits != nullptr ? d_logits + row * Vp : nullptr;
  if (target < 0 || target >= V) {  // the whole block leaves together: no barrier is skipped
    if (threadIdx.x == 0) {
      if (target >= V) record_bad_target(bad_target, row, target);
      losses[row] = target < 0 ? 0.0f : __int_as_float(0x7fc00000);
    }
    if (dl != nullptr) {
      Pack<E, W> zeros;
#pragma unroll
      for (int j = 0; j < W; ++j) zeros.v[j] = 0.0f;
      for (int v = threadIdx.x * W; v < Vp; v += blockDim.x * W) zeros.store(dl + v);
    }
    return;
  }
  const E* x = logits + row * Vp;
  const float x_target = to_f32(x[target]);  // before any write to an aliased d_logits
  // Pass 1: per thread a running (max, sum of e^{x - max}), rescaled once per Pack.
  float m = -INFINITY;
  float s = 0.0f;
  for (int v = threadIdx.x * W; v < V; v += blockDim.x * W) {
    Pack<E, W> p;
    p.load(x + v);
    float pack_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < W; ++j) pack_max = v + j < V ? fmaxf(pack_max, p.v[j]) : pack_max;
    if (pack_max > m) {
      s = m == -INFINITY ? 0.0f : s * exp_minus(m, pack_max * kLog2e);
      m = pack_max;
    }
    const float m_log2e = m * kLog2e;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (v + j < V) s += p.v[j] == m ? 1.0f : exp_minus(p.v[j], m_log2e);
    }
  }
  block_max_sum(m, s);
  if (threadIdx.x == 0) losses[row] = logf(s) + m - x_target;
  if (dl == nullptr) return;
  // Pass 2: d_logits_v = e^{x_v - max} * grad_scale / sum - grad_scale [v == target], padding 0.
  const float factor = grad_scale / s;
  const float m_log2e = m * kLog2e;
  for (int v = threadIdx.x * W; v < Vp; v += blockDim.x * W) {
    Pack<E, W> p;
    p.load(x + v);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      float d = v + j < V ? exp_minus(p.v[j], m_log2e) * factor : 0.0f;
      if (v + j == target) d -= grad_scale;
      p.v[j] = d;
    }
    p.store(dl + v);
  }
}

constexpr int kStats = kCrossEntropyShardStats;  // per row and shard: max, sum of e^{x - max}, target logit

// One block per row of one vocabulary shard (columns [shard*Vs, (shard+1)*Vs), real below V).
template <typename E>
__global__ void shard_stats_kernel(float* stats, const E* logits, const std::int32_t* targets, int V, int Vs,
                                   int shard, unsigned long long* bad_target) {
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  const std::int64_t v0 = std::int64_t{shard} * Vs;
  const int real = static_cast<int>(min(max(std::int64_t{V} - v0, std::int64_t{0}), std::int64_t{Vs}));
  const E* x = logits + row * Vs;
  float m = -INFINITY;
  float s = 0.0f;
  for (int v = threadIdx.x; v < real; v += blockDim.x) combine(m, s, to_f32(x[v]), 1.0f);
  block_max_sum(m, s);
  if (threadIdx.x != 0) return;
  if (target >= V) record_bad_target(bad_target, row, target);
  const std::int64_t t = std::int64_t{target} - v0;
  float* out = stats + row * kStats;
  out[0] = m;
  out[1] = s;
  out[2] = target >= 0 && target < V && t >= 0 && t < real ? to_f32(x[t]) : 0.0f;
}

template <typename E>
__global__ void shard_loss_kernel(float* losses, E* d_logits, const E* logits, const float* all_stats,
                                  const std::int32_t* targets, int N, int V, int Vs, int shard, int shards,
                                  float grad_scale, unsigned long long* bad_target) {
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  E* dl = d_logits != nullptr ? d_logits + row * Vs : nullptr;
  if (target < 0 || target >= V) {  // the whole block leaves together
    if (threadIdx.x == 0) {
      if (target >= V) record_bad_target(bad_target, row, target);
      losses[row] = target < 0 ? 0.0f : __int_as_float(0x7fc00000);
    }
    if (dl != nullptr) {
      for (int v = threadIdx.x; v < Vs; v += blockDim.x) store_f32(dl + v, 0.0f);
    }
    return;
  }
  // Every thread merges the shards' (max, sum) pairs itself: shards is the tp degree, a handful.
  const std::int64_t stride = std::int64_t{N} * kStats;
  float m = -INFINITY;
  float s = 0.0f;
  for (int r = 0; r < shards; ++r)
    combine(m, s, all_stats[r * stride + row * kStats], all_stats[r * stride + row * kStats + 1]);
  const int owner = target / Vs;
  if (threadIdx.x == 0) losses[row] = logf(s) + m - all_stats[owner * stride + row * kStats + 2];
  if (dl == nullptr) return;
  const std::int64_t v0 = std::int64_t{shard} * Vs;
  const float factor = grad_scale / s;
  for (int v = threadIdx.x; v < Vs; v += blockDim.x) {
    float d = 0.0f;
    if (v0 + v < V) {
      d = expf(to_f32(logits[row * Vs + v]) - m) * factor;
      if (v0 + v == target) d -= grad_scale;
    }
    store_f32(dl + v, d);
  }
}

// Threads per row: about 8 items (columns, or Packs of them) each, a multiple of 32 in [32, 512].
int row_block(int items) {
  return std::clamp(((items + 7) / 8 + 31) / 32 * 32, 32, 512);
}

}  // namespace

void cross_entropy_shard_stats(const LaunchContext& ctx, Buf stats, Buf logits, Buf targets, int N, int V,
                               int Vs, int shard) {
  check_cross_entropy_shard_stats("cuda", stats, logits, targets, N, V, Vs, shard);
  if (N == 0) return;
  dispatch_float(logits.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    shard_stats_kernel<E><<<static_cast<unsigned>(N), row_block(Vs), 0, ctx.stream>>>(
        typed<float>(stats), typed<const E>(logits), typed<const std::int32_t>(targets), V, Vs, shard,
        ctx.bad_target);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_shard_forward_backward(const LaunchContext& ctx, Buf losses, Buf d_logits, Buf logits,
                                          Buf all_stats, Buf targets, int N, int V, int Vs, int shard,
                                          int shards, float grad_scale) {
  check_cross_entropy_shard_forward_backward("cuda", losses, d_logits, logits, all_stats, targets, N, V, Vs,
                                             shard, shards);
  if (N == 0) return;
  dispatch_float(logits.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    shard_loss_kernel<E><<<static_cast<unsigned>(N), row_block(Vs), 0, ctx.stream>>>(
        typed<float>(losses), typed<E>(d_logits), typed<const E>(logits), typed<const float>(all_stats),
        typed<const std::int32_t>(targets), N, V, Vs, shard, shards, grad_scale, ctx.bad_target);
    PTRAIN_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_forward_backward(const LaunchContext& ctx, Buf losses, Buf d_logits, Buf logits,
                                    Buf targets, int N, int V, int Vp, float grad_scale) {
  check_cross_entropy_forward_backward("cuda", losses, d_logits, logits, targets, N, V, Vp);
  if (N == 0) return;

  dispatch_float(logits.dtype, [&](auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    with_row_pack<E>(rows_vectorizable<E>(Vp, {logits, d_logits}), [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      cross_entropy_kernel<E, P><<<static_cast<unsigned>(N), row_block(Vp / P), 0, ctx.stream>>>(
          typed<float>(losses), typed<E>(d_logits), typed<const E>(logits), typed<const std::int32_t>(targets),
          V, Vp, grad_scale, ctx.bad_target);
      PTRAIN_CUDA_CHECK_LAUNCH();
    });
  });
}

void queue_bad_target_readback(const LaunchContext& ctx) {
  PTRAIN_CUDA_CHECK(cudaMemcpyAsync(ctx.bad_target_host, ctx.bad_target, sizeof(unsigned long long),
                                    cudaMemcpyDeviceToHost, ctx.stream));
}

void throw_if_bad_target(const LaunchContext& ctx) {
  const unsigned long long found = *ctx.bad_target_host;
  if (found == kNoBadTarget) return;
  *ctx.bad_target_host = kNoBadTarget;
  PTRAIN_CUDA_CHECK(cudaMemsetAsync(ctx.bad_target, 0xff, sizeof(unsigned long long), ctx.stream));
  const auto row = static_cast<std::int64_t>(found >> 32);
  const auto target = static_cast<std::int32_t>(static_cast<std::uint32_t>(found & 0xffffffffull));
  fail("cuda", "cross_entropy_forward_backward",
       "target " + std::to_string(target) + " at row " + std::to_string(row) +
           " >= V (found by the kernel, reported at the next read back)");
}

}  // namespace ptrain::kernels::cuda
